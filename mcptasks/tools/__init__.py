"""The tool API for tool authors: ``@tool``, ``ToolContext``, ``ToolError``, ``Answer``."""

from mcptasks.tools.context import (
    Answer,
    EffectKey,
    Question,
    ToolContext,
    ToolError,
    WaitTimedOut,
)
from mcptasks.tools.registry import tool

__all__ = ["Answer", "EffectKey", "Question", "ToolContext", "ToolError", "WaitTimedOut", "tool"]
