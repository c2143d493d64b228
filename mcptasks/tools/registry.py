"""The tool registry: ``@tool`` declarations, input schemas from signatures, tool packs."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import threading
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from django.conf import settings

from mcptasks.canonical import digest

Policy = Literal["sync", "task", "auto"]
POLICIES = ("sync", "task", "auto")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Served by the server itself while a tool opts in to the task fallback (mcp/task_tools.py).
FALLBACK_TOOL_NAMES = ("task_cancel", "task_status")


class ToolRegistrationError(Exception):
    """A tool declaration contradicts itself (bad name, schema, or limits vs TTL)."""


class ToolPackError(Exception):
    """A configured tool pack failed to load: it does not import, or one of its tools'
    declarations contradicts itself. ``serve`` and the worker refuse to start on it."""


@dataclass
class ToolDef:
    name: str
    fn: Callable[..., Any]
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    title: str | None = None
    policy: Policy = "auto"
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    required_capabilities: dict[str, Any] = field(default_factory=dict)
    sensitive: frozenset[str] = frozenset()
    annotations: dict[str, Any] | None = None
    max_input_wait_s: float | None = None
    max_run_s: float | None = None
    on_input_timeout: Literal["fail", "answer"] = "fail"
    on_build_change: Literal["continue", "fail"] = "continue"
    # Client-audience questions go to operators when the client cannot elicit.
    operator_fallback: bool = False
    # A client without the tasks extension gets the task anyway, answered as an ordinary
    # CallToolResult naming it and the task_status / task_cancel tools (mcp/task_tools.py).
    task_fallback: bool = False
    # A task tool whose first questions are asked before the task exists (``before_task=True``):
    # only then does any of its code run in the web request (MCPTASKS_PRE_TASK_LIMIT_S).
    asks_before_task: bool = False
    # An operator may retry a task of this tool that failed with an exception (a new task that
    # replays the failed one's recorded steps and applied effects: mcptasks/failures.py).
    retryable: bool = True
    pack: str = ""

    @functools.cached_property
    def policy_revision(self) -> str:
        """Digest of everything that decides how the tool's tasks behave (computed once: a
        tool's definition does not change once registered; every creation binds it)."""
        return digest(
            {
                "name": self.name,
                "policy": self.policy,
                "ttl_ms": self.ttl_ms,
                "input_schema": self.input_schema,
                "output_schema": self.output_schema,
                "required_capabilities": self.required_capabilities,
                "sensitive": sorted(self.sensitive),
                "on_input_timeout": self.on_input_timeout,
                "on_build_change": self.on_build_change,
                "operator_fallback": self.operator_fallback,
            }
        )[:32]

    def effective_ttl_ms(self) -> int | None:
        return self.ttl_ms if self.ttl_ms is not None else settings.MCPTASKS_DEFAULT_TTL_MS

    def effective_poll_interval_ms(self) -> int:
        return self.poll_interval_ms or settings.MCPTASKS_DEFAULT_POLL_INTERVAL_MS

    def wire(self) -> dict[str, Any]:
        """The ``Tool`` object of ``tools/list``."""
        item: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.title:
            item["title"] = self.title
        if self.output_schema is not None:
            item["outputSchema"] = self.output_schema
        if self.annotations:
            item["annotations"] = self.annotations
        return item


_SIMPLE = {str: "string", int: "integer", bool: "boolean", float: "number"}


def _schema_for(annotation: Any) -> dict[str, Any]:
    if annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (list, tuple) and args:
        return {"type": "array", "items": _schema_for(args[0])}
    if origin in (list, tuple):
        return {"type": "array"}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return {**_schema_for(options[0])}
        return {"anyOf": [_schema_for(a) for a in options]}
    if annotation is dict or origin is dict:
        return {"type": "object"}
    return {}


def schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema (2020-12) object for ``fn(ctx, **arguments)``."""
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for index, (name, parameter) in enumerate(signature.parameters.items()):
        if index == 0:
            continue  # the ToolContext
        if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            raise ToolRegistrationError(f"{fn.__name__}: *args/**kwargs cannot be described")
        prop = _schema_for(hints.get(name, Any))
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
        elif parameter.default is not None:
            prop["default"] = parameter.default
        properties[name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


class Registry:
    def __init__(self) -> None:
        self._tools: dict[str, ToolDef] = {}
        self._loaded = False
        self._lock = threading.Lock()

    def register(self, tool_def: ToolDef) -> ToolDef:
        if not TOOL_NAME.match(tool_def.name):
            raise ToolRegistrationError(
                f"tool name {tool_def.name!r} must match {TOOL_NAME.pattern}"
            )
        if tool_def.policy not in POLICIES:
            raise ToolRegistrationError(f"{tool_def.name}: policy must be one of {POLICIES}")
        if tool_def.name in FALLBACK_TOOL_NAMES:
            raise ToolRegistrationError(
                f"tool name {tool_def.name!r} is reserved for the task fallback tools"
            )
        if tool_def.task_fallback and tool_def.policy != "task":
            raise ToolRegistrationError(
                f"{tool_def.name}: task_fallback applies to policy='task' tools only (an 'auto' "
                "tool already runs inline for a client without the tasks extension)"
            )
        if tool_def.input_schema.get("type") != "object":
            raise ToolRegistrationError(f"{tool_def.name}: inputSchema root must be an object")
        ttl = tool_def.effective_ttl_ms()
        for limit in ("max_input_wait_s", "max_run_s", "poll_interval_ms", "ttl_ms"):
            value = getattr(tool_def, limit)
            if value is not None and not value > 0:
                raise ToolRegistrationError(f"{tool_def.name}: {limit}={value} must be positive")
        poll = tool_def.poll_interval_ms
        if ttl is not None and poll is not None and poll >= ttl:
            raise ToolRegistrationError(
                f"{tool_def.name}: poll_interval_ms={poll} must be below ttl_ms={ttl}, or the "
                "task would expire between two polls"
            )
        limits_s = (tool_def.max_input_wait_s or 0) + (tool_def.max_run_s or 0)
        if ttl is not None and limits_s and limits_s * 1000 >= ttl:
            raise ToolRegistrationError(
                f"{tool_def.name}: ttl_ms={ttl} must exceed max_input_wait_s + max_run_s "
                f"({limits_s:g} s), or tasks would expire before they can finish"
            )
        existing = self._tools.get(tool_def.name)
        if existing is not None and existing.fn is not tool_def.fn:
            raise ToolRegistrationError(f"tool {tool_def.name!r} is registered twice")
        self._tools[tool_def.name] = tool_def
        return tool_def

    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            for module in tool_packs():
                try:
                    importlib.import_module(module)
                except Exception as exc:
                    raise ToolPackError(
                        f"tool pack {module!r} failed to load: {type(exc).__name__}: {exc}"
                    ) from exc
            self._loaded = True

    def get(self, name: str) -> ToolDef | None:
        self.ensure_loaded()
        tool_def = self._tools.get(name)
        return tool_def if tool_def is not None and tool_def.pack in tool_packs() else None

    def all(self) -> list[ToolDef]:
        """Every tool of the configured packs, in name order (deterministic)."""
        self.ensure_loaded()
        packs = tool_packs()
        return sorted((t for t in self._tools.values() if t.pack in packs), key=lambda t: t.name)


def tool_packs() -> list[str]:
    packs = list(settings.MCPTASKS_TOOL_PACKS)
    if settings.MCPTASKS_CONFORMANCE_MODE:
        packs += [p for p in CONFORMANCE_PACKS if p not in packs]
    return packs


# The official suite's fixture tools: loaded only in conformance mode.
CONFORMANCE_PACKS = ("mcptasks.tools.conformance", "mcptasks.tools.conformance_base")


registry = Registry()


def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    policy: Policy = "auto",
    **options: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn(ctx, **arguments)`` as an MCP tool of the module's pack."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        doc = inspect.getdoc(fn) or ""
        registry.register(
            ToolDef(
                name=name or fn.__name__,
                fn=fn,
                description=description or doc.split("\n\n")[0] or (name or fn.__name__),
                input_schema=input_schema or schema_from_signature(fn),
                output_schema=output_schema,
                policy=policy,
                pack=fn.__module__,
                **options,
            )
        )
        return fn

    return decorate
