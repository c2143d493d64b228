"""The tool API for tool authors: ``@tool``, ``ToolContext``, ``ToolError``, ``Answer``."""

from mcptasks.tools.context import (
    Answer,
    ApprovalOutcome,
    ApprovalPolicy,
    EffectKey,
    Question,
    ToolContext,
    ToolError,
    WaitTimedOut,
)
from mcptasks.tools.registry import tool

__all__ = [
    "Answer",
    "ApprovalOutcome",
    "ApprovalPolicy",
    "EffectKey",
    "Question",
    "ToolContext",
    "ToolError",
    "WaitTimedOut",
    "tool",
]
