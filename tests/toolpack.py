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
