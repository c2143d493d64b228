"""``tools/call``: inline execution with MRTR, or a durable task (DESIGN §4)."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

import jsonschema
from django.conf import settings
from referencing.exceptions import Unresolvable
from rfc8785 import CanonicalizationError

from mcptasks import access, approval_policies, lifecycle, metrics, wire
from mcptasks.canonical import digest
from mcptasks.interrupt import time_limit
from mcptasks.mcp import task_tools
from mcptasks.protocol.call import TASKS_EXTENSION, Call
from mcptasks.protocol.errors import INTERNAL_ERROR, McpError, invalid_params, missing_capability
from mcptasks.protocol.headers import check_param_headers
from mcptasks.protocol.request_state import RequestState
from mcptasks.tools.answers import offline_validator
from mcptasks.tools.context import Suspend, ToolDefinitionError, ToolError
from mcptasks.tools.inline import (
    InlineContext,
    InputRequired,
    InvalidInputResponse,
    MissingClientCapability,
    StartTask,
    TaskRequired,
)
from mcptasks.tools.registry import FALLBACK_TOOL_NAMES, ToolDef, registry
from mcptasks.tools.results import to_call_tool_result

log = logging.getLogger(__name__)

# Client idempotency key for retry-safe task creation (README "Retry-safe creation").
IDEMPOTENCY_META = "dev.mcptasks/idempotencyKey"
TASKS_REQUIRED: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


class PreTaskTimeLimit(BaseException):
    """A task tool's code before its task exists ran past MCPTASKS_PRE_TASK_LIMIT_S (a
    BaseException, so the tool's ``except Exception`` cannot swallow it)."""


def handle_tools_call(call: Call) -> dict[str, Any]:
    params = call.params
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_params("params.name must be the name of a tool")
    tool_def = registry.get(name)
    arguments = params.get("arguments", {})
    if arguments is None:
        arguments = {}
    if tool_def is None and name in FALLBACK_TOOL_NAMES and task_tools.offered():
        if not isinstance(arguments, dict):
            raise invalid_params("params.arguments must be an object")
        return task_tools.call_tool(call, name, arguments)
    if tool_def is None:
        raise invalid_params(f"Unknown tool: {name}")
    if not isinstance(arguments, dict):
        raise invalid_params("params.arguments must be an object")
    check_param_headers(call.headers, tool_def.input_schema, arguments)
    missing = {
        cap: spec
        for cap, spec in tool_def.required_capabilities.items()
        if cap not in call.capabilities
    }
    if missing:
        raise missing_capability(missing, ", ".join(sorted(missing)))
    as_task = tool_def.policy == "task" or (tool_def.policy == "auto" and call.declares_tasks)
    if as_task and not call.declares_tasks and not tool_def.task_fallback:
        raise missing_capability(TASKS_REQUIRED, f"tool {name!r} runs only as a task")
    try:
        # What requestState and the task bind (computed once here); refuse what it cannot carry.
        argument_digest = digest(arguments)
    except (CanonicalizationError, RecursionError):
        raise invalid_params(
            "params.arguments must be interoperable JSON: integers within "
            "±(2^53-1) and nesting a few hundred levels deep at most"
        ) from None
    try:
        errors = sorted(
            offline_validator(tool_def.input_schema).iter_errors(arguments),
            key=lambda e: list(e.path),
        )
    except Unresolvable:
        log.error("tool %s has an inputSchema with a $ref that cannot be resolved offline", name)
        raise McpError(
            INTERNAL_ERROR,
            f"Tool {name!r} is misdefined: its inputSchema has a "
            "$ref this server does not resolve (network $refs are never fetched)",
        ) from None
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "arguments"
        return tool_error_result(f"Invalid arguments for {name}: {where}: {errors[0].message}")
    state, offered = _open_state(call, tool_def, arguments, argument_digest)
    if as_task and not tool_def.asks_before_task:
        # Nothing of the tool runs here: the arguments are still the ones digested above.
        return _create_task(call, tool_def, arguments, state, argument_digest)
    context = InlineContext(
        tool_name=name,
        arguments=arguments,
        capabilities=call.capabilities,
        answers=state.answers,
        pre_task=as_task,
        offered=offered,
        progress=call.progress,
    )
    limit = settings.MCPTASKS_PRE_TASK_LIMIT_S if as_task else None
    try:
        try:
            with time_limit(limit, PreTaskTimeLimit) if limit else nullcontext():
                value = tool_def.fn(context, **arguments)
        finally:
            state.asked.update(context.asked)
    except PreTaskTimeLimit:
        log.error("tool %s ran past MCPTASKS_PRE_TASK_LIMIT_S before its task existed", name)
        raise McpError(
            INTERNAL_ERROR,
            f"Tool {name!r} ran longer than {limit:g} s before its task existed "
            "(MCPTASKS_PRE_TASK_LIMIT_S): no task was created",
        ) from None
    except StartTask:
        return _create_task(call, tool_def, arguments, state)
    except InputRequired as pending:
        return {
            "resultType": "input_required",
            "inputRequests": pending.requests,
            "requestState": state.seal(settings.REQUEST_STATE_KEY),
        }
    except InvalidInputResponse as exc:
        raise invalid_params(str(exc), {"key": exc.key}) from None
    except TaskRequired as exc:
        if tool_def.policy == "auto":
            raise missing_capability(
                TASKS_REQUIRED, f"question {exc.key!r} of tool {name!r} needs a task"
            ) from None
        log.error("tool %s asks question %r inline that its caller may not answer", name, exc.key)
        raise McpError(
            INTERNAL_ERROR,
            f"Tool {name!r} is misdefined: question {exc.key!r} "
            "must be answered by someone other than the caller, which needs a task",
        ) from None
    except Suspend:
        raise McpError(INTERNAL_ERROR, "Tool suspended unexpectedly") from None
    except MissingClientCapability as exc:
        raise missing_capability({exc.capability: {}}, exc.capability) from None
    except ToolError as exc:
        if as_task:
            return _create_task(call, tool_def, arguments, state)
        return tool_error_result(str(exc))
    except ToolDefinitionError as exc:
        log.error("tool %s broke the tool API: %s", name, exc)
        raise McpError(INTERNAL_ERROR, f"Tool {name!r} is misdefined: {exc}") from None
    except Exception:
        log.exception("inline tool raised", extra={"tool": name})
        if as_task:
            return _create_task(call, tool_def, arguments, state)
        raise McpError(INTERNAL_ERROR, f"Tool {name!r} failed with an internal error") from None
    if as_task:
        return _create_task(call, tool_def, arguments, state)
    try:
        return to_call_tool_result(value, tool_def)
    except (TypeError, ValueError, jsonschema.ValidationError):
        log.exception("tool %s returned an unusable result", name)
        raise McpError(
            INTERNAL_ERROR, f"Tool {name!r} returned a result that does not match its outputSchema"
        ) from None


def tool_error_result(message: str) -> dict[str, Any]:
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": message}],
        "isError": True,
    }


def _open_state(
    call: Call, tool_def: ToolDef, arguments: dict[str, Any], argument_digest: str
) -> tuple[RequestState, dict[str, Any]]:
    """The MRTR state of this round (verified ``requestState``, or a fresh one) and this round's
    ``inputResponses``, which the tool's questions validate as they are asked (PROTOCOL §3.3:
    keys it does not ask are ignored; an answer that does not fit its request is -32602)."""
    principal = call.principal
    raw_state = call.params.get("requestState")
    responses = call.params.get("inputResponses")
    if responses is not None and not isinstance(responses, dict):
        raise invalid_params("params.inputResponses must be an object")
    if raw_state is None:
        state = RequestState(
            principal_id=principal.user.pk,
            tenant_id=principal.tenant.pk,
            tool=tool_def.name,
            argument_digest=argument_digest,
        )
    else:
        state = RequestState.open(
            raw_state,
            key=settings.REQUEST_STATE_KEY,
            principal_id=principal.user.pk,
            tenant_id=principal.tenant.pk,
            tool=tool_def.name,
            argument_digest=argument_digest,
        )
    return state, responses or {}


@metrics.TASK_CREATE_SECONDS.time()
def _create_task(
    call: Call,
    tool_def: ToolDef,
    arguments: dict[str, Any],
    state: RequestState,
    argument_digest: str | None = None,
) -> dict[str, Any]:
    """Create the call's task (``argument_digest``: that of ``arguments`` if known, else it is
    computed at creation: the tool may have run, and changed them, since the first)."""
    principal = call.principal
    answered = [
        lifecycle.AnsweredInput(
            key=key,
            method=state.asked[key]["method"],
            params=state.asked[key]["params"],
            response=response,
        )
        for key, response in state.answers.items()
        if key in state.asked
    ]
    idempotency_key = call.params["_meta"].get(IDEMPOTENCY_META)
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str)
        or not 1 <= len(idempotency_key) <= 128
        or not idempotency_key.isprintable()
    ):
        raise invalid_params(
            f"_meta[{IDEMPOTENCY_META!r}] must be a string of 1 to 128 printable characters"
        )
    if idempotency_key:
        creation_key: str | None = f"idem:{idempotency_key}"
    else:
        creation_key = f"mrtr:{state.nonce}" if answered else None
    try:
        task, _ = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=principal.tenant.pk,
                principal_id=principal.user.pk,
                token_id=principal.token_id,
                tool_name=tool_def.name,
                arguments=arguments,
                argument_digest=argument_digest,
                policy_revision=approval_policies.bound_revision(
                    tool_def, tenant_id=principal.tenant.pk, arguments=arguments
                ),
                ttl_ms=tool_def.effective_ttl_ms(),
                poll_interval_ms=tool_def.effective_poll_interval_ms(),
                client_capabilities=call.capabilities,
                creation_key=creation_key,
                sensitive_keys=tool_def.sensitive,
                answered_inputs=answered,
                tenant=principal.tenant,
            ),
            actor=access.actor(principal.user, "mcp"),
        )
    except lifecycle.CreationKeyConflict as exc:
        raise invalid_params(
            f"Idempotency key conflict: {exc}", {"idempotencyKey": idempotency_key}
        ) from None
    except lifecycle.LimitExceeded as exc:
        return tool_error_result(str(exc))
    if not call.declares_tasks:  # a task_fallback tool: never a CreateTaskResult
        return task_tools.started(task, tool_def)
    return {"resultType": "task", **wire.task_fields(task)}
