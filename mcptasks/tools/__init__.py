"""The tool API for tool authors: ``@tool``, ``ToolContext``, ``ToolError``, ``Answer``."""

from mcptasks.tools.context import Answer, Question, ToolContext, ToolError
from mcptasks.tools.registry import tool

__all__ = ["Answer", "Question", "ToolContext", "ToolError", "tool"]
