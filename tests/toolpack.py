"""Tools used by the tests only (loaded through MCPTASKS_TOOL_PACKS in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

from mcptasks.tools import ToolContext, ToolError, tool


@tool(policy="task")
def echo_task(ctx: ToolContext, text: str = "hi") -> str:
    """Return the text as a task."""
    return text


@tool(policy="task")
def tool_error_task(ctx: ToolContext) -> str:
    """Fail with a tool error."""
    raise ToolError("business failure")


@tool(policy="task")
def ask_twice(ctx: ToolContext) -> dict[str, Any]:
    """Ask two questions at once and return the answers."""
    answers = ctx.ask_many({
        "name": ctx_question("Your name?", {"name": {"type": "string"}}),
        "confirm": ctx_question("Sure?", {"confirm": {"type": "boolean"}}),
    })
    return {key: answer.content for key, answer in answers.items()}


def ctx_question(message: str, properties: dict[str, Any]) -> Any:
    from mcptasks.tools import Question

    return Question(message=message, schema={"type": "object", "properties": properties})


# ---------------------------------------------------------------- issue 5: fault tests
# tests/faults/ runs this tool in real Celery worker processes and kills them mid-run. The
# downstream (tests/faults/downstream.py) counts every call per idempotency key in PostgreSQL.
@tool(policy="task", ttl_ms=1_800_000)
def fault_steps(ctx: ToolContext, steps: int = 3, sleep_s: float = 0.2, work_s: float = 0.1,
                slow_step: int = 0, slow_s: float = 0.0) -> dict[str, Any]:
    """Run ``steps`` idempotent effects against the fake downstream, sleeping durably between.

    The token from ``ctx.uuid()`` travels in every effect's payload, so a replay that lost a
    recorded outcome (and drew a new token) shows as a mismatch with what the downstream kept.
    """
    from tests.faults import downstream

    token = str(ctx.uuid())
    started = ctx.now().isoformat()
    attempt = int(getattr(ctx, "attempt", 0))
    outcomes = []
    for number in range(1, steps + 1):
        ctx.report(f"step {number} of {steps}")
        payload = {"token": token, "step": number}
        work = slow_s if number == slow_step else work_s
        outcomes.append(ctx.effect(
            f"step-{number}",
            lambda key, payload=payload, work=work: downstream.call(
                key, payload=payload, work_s=work, attempt=attempt),
            idempotent=True))
        if sleep_s and number < steps:
            ctx.sleep(f"pause-{number}", sleep_s)
    return {"token": token, "started": started, "steps": outcomes}
# ---------------------------------------------------------------- issue 3: the MCP endpoint
# Tools of tests/protocol/. PROTOCOL_PROBES counts how often a tool body and its effects really
# ran, so a test can prove that nothing ran (a rejected requestState) or ran once (MRTR rounds).
import collections  # noqa: E402
import collections.abc  # noqa: E402

PROTOCOL_PROBES: collections.Counter[str] = collections.Counter()
NAME_ONLY = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
OK_ONLY = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def _probe(name: str) -> collections.abc.Callable[[str], str]:
    def effect(idempotency_key: str) -> str:
        PROTOCOL_PROBES[name] += 1
        return f"{name} applied ({idempotency_key.split(':')[0]})"

    return effect


@tool(policy="sync")
def mrtr_confirm_then_apply(ctx: ToolContext, target: str = "db") -> str:
    """Ask for confirmation (MRTR), then apply a side effect after the last question."""
    PROTOCOL_PROBES["confirm_then_apply.runs"] += 1
    answer = ctx.ask("confirm", f"Apply to {target}?", OK_ONLY)
    if not answer.accepted:
        return f"not applied ({answer.action})"
    if not answer.content["ok"]:
        return "not applied (declined in the form)"
    return ctx.effect("apply", _probe("apply"))


@tool(policy="sync")
def mrtr_two_rounds_then_apply(ctx: ToolContext) -> str:
    """Two MRTR rounds (the second question depends on the first answer), then one effect."""
    name = ctx.ask("name", "Your name?", NAME_ONLY)
    confirm = ctx.ask("confirm", f"Apply for {name.content.get('name')}?", OK_ONLY)
    if not confirm.content.get("ok"):
        return "not applied"
    return ctx.effect("apply", _probe("two_rounds.apply"))


@tool(policy="sync")
def mrtr_effect_before_ask(ctx: ToolContext) -> str:
    """Breaks the inline rule: an effect, then a question."""
    ctx.effect("early", _probe("early"))
    ctx.ask("late", "Too late?", OK_ONLY)
    return "unreachable"


@tool(policy="sync")
def mrtr_sample(ctx: ToolContext) -> str:
    """Ask the client's model (sampling through MRTR)."""
    response = ctx.sample("question", [{"role": "user",
                                        "content": {"type": "text", "text": "2+2?"}}])
    return str(response.get("content", {}).get("text", ""))


@tool(policy="sync")
def mrtr_roots(ctx: ToolContext) -> str:
    """Ask the client for its roots (roots/list through MRTR)."""
    return ", ".join(root["uri"] for root in ctx.roots("roots"))


@tool(policy="sync", required_capabilities={"sampling": {}})
def needs_sampling(ctx: ToolContext) -> str:
    """Declares that it needs the client's sampling capability."""
    PROTOCOL_PROBES["needs_sampling.runs"] += 1
    return "ran"


@tool(policy="auto")
def operator_gate(ctx: ToolContext) -> str:
    """An approval only someone other than the caller may give."""
    answer = ctx.ask("approve", "Approve?", OK_ONLY, audience="operator",
                     forbid_self_approval=True)
    return f"approved={answer.content.get('ok')}"


@tool(policy="sync", input_schema={
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry_run": {"type": "boolean", "x-mcp-header": "Dry-Run"},
        "note": {"type": "string"},
    },
    "additionalProperties": False,
})
def routed(ctx: ToolContext, region: str | None = None, count: int | None = None,
           dry_run: bool | None = None, note: str = "") -> str:
    """Arguments mirrored into Mcp-Param-* headers (x-mcp-header)."""
    return f"region={region} count={count} dry_run={dry_run} note={note}"


STRUCTURED = {"type": "object", "properties": {"total": {"type": "integer"}},
              "required": ["total"], "additionalProperties": False}


@tool(policy="sync", output_schema=STRUCTURED)
def structured_total(ctx: ToolContext, values: list[int], corrupt: bool = False) -> dict[str, Any]:
    """Sum integers into structured content; ``corrupt`` breaks the outputSchema."""
    if corrupt:
        return {"total": "many"}
    return {"total": sum(values)}


@tool(policy="sync")
def inline_boom(ctx: ToolContext) -> str:
    """Crash inline with an exception whose text must never reach the client."""
    PROTOCOL_PROBES["inline_boom.runs"] += 1
    raise RuntimeError("password=hunter2 in a stack trace")


@tool(policy="sync")
def inline_tool_error(ctx: ToolContext) -> str:
    """A business failure: isError, not a protocol error."""
    raise ToolError("the quota is exhausted")


@tool(policy="sync")
def inline_report(ctx: ToolContext) -> str:
    """Reports progress while working (never a notification on the response)."""
    ctx.report("halfway")
    return "reported"


@tool(policy="sync", input_schema={
    "type": "object",
    "properties": {"spec": {"$ref": "http://127.0.0.1:9/remote-schema.json"}},
})
def remote_ref(ctx: ToolContext, spec: Any = None) -> str:
    """An inputSchema with a network $ref, which must never be fetched."""
    PROTOCOL_PROBES["remote_ref.runs"] += 1
    return "ran"


@tool(policy="task", ttl_ms=300_000, poll_interval_ms=500)
def confirm_before_task(ctx: ToolContext, item: str = "x") -> str:
    """Confirm before the task exists (MRTR), then work in a task."""
    answer = ctx.ask("go", f"Queue {item}?", OK_ONLY, before_task=True)
    return f"queued {item}: {answer.content.get('ok')}"
