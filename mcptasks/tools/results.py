"""Turning a tool's return value into a ``CallToolResult``."""

from __future__ import annotations

import json
from typing import Any

from mcptasks.tools.answers import offline_validator
from mcptasks.tools.registry import ToolDef


def to_call_tool_result(value: Any, tool_def: ToolDef) -> dict[str, Any]:
    """A ``CallToolResult`` (with ``resultType: complete``) for what the tool returned.

    A dict with ``content`` is taken as a result already; a string becomes a text block; other
    JSON becomes ``structuredContent`` (checked against ``outputSchema``) plus its text form.
    Raises ``jsonschema.ValidationError`` or ``TypeError`` for a result that cannot be sent.
    """
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        result = {k: v for k, v in value.items() if k != "resultType"}
    elif isinstance(value, str):
        result = {"content": [{"type": "text", "text": value}]}
    elif value is None:
        result = {"content": [{"type": "text", "text": "Done."}]}
    else:
        text = json.dumps(value, ensure_ascii=False)
        result = {"content": [{"type": "text", "text": text}]}
        if tool_def.output_schema is not None or isinstance(value, dict):
            result["structuredContent"] = value
    if tool_def.output_schema is not None:
        if "structuredContent" not in result:
            raise ValueError("a tool with an outputSchema must return structured content")
        offline_validator(tool_def.output_schema).validate(result["structuredContent"])
    json.dumps(result)  # raises TypeError for values JSON cannot carry
    return {"resultType": "complete", **result}
