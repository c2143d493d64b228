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
    answers = ctx.ask_many(
        {
            "name": ctx_question("Your name?", {"name": {"type": "string"}}),
            "confirm": ctx_question("Sure?", {"confirm": {"type": "boolean"}}),
        }
    )
    return {key: answer.content for key, answer in answers.items()}


def ctx_question(message: str, properties: dict[str, Any]) -> Any:
    from mcptasks.tools import Question

    return Question(message=message, schema={"type": "object", "properties": properties})


# ---------------------------------------------------------------- issue 4: tasks, replay, live
# Tools of tests/tasks/ and tests/live/. Module-level state lets a test observe how often a
# step really ran and steer a tool between runs; reset it with ``reset_probes()``.
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402

from mcptasks.tools import Question  # noqa: E402

EFFECT_CALLS: Counter[str] = Counter()
EFFECT_KEYS: dict[str, list[str]] = {}
FLAGS: dict[str, bool] = {}
HOOKS: dict[str, Callable[[], None]] = {}
REACHED: list[str] = []


def reset_probes() -> None:
    EFFECT_CALLS.clear()
    EFFECT_KEYS.clear()
    FLAGS.clear()
    HOOKS.clear()
    REACHED.clear()


def _downstream(name: str) -> Callable[[str], dict[str, Any]]:
    """A fake downstream call that counts how often it really runs."""

    def call(idempotency_key: str) -> dict[str, Any]:
        EFFECT_CALLS[name] += 1
        EFFECT_KEYS.setdefault(name, []).append(idempotency_key)
        return {"step": name, "call": EFFECT_CALLS[name]}

    return call


def _yes_no(message: str, field: str = "ok") -> Question:
    return Question(
        message=message,
        schema={"type": "object", "properties": {field: {"type": "boolean"}}, "required": [field]},
    )


@tool(policy="auto")
def echo_auto(ctx: ToolContext, text: str = "hi") -> dict[str, Any]:
    """Return the text as structured content; a task when the client allows one."""
    return {"content": [{"type": "text", "text": text}], "structuredContent": {"text": text}}


@tool(policy="task")
def crash_task(ctx: ToolContext) -> str:
    """Crash with an exception whose text must never reach the client."""
    ctx.report("about to crash")
    raise RuntimeError("internal detail: widget cache overflow at shard 7")


@tool(policy="task")
def ask_same_key_twice(ctx: ToolContext) -> str:
    """Break the key rule: ask the same key twice."""
    ctx.ask("k", "First?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    ctx.ask("k", "Again?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    return "unreachable"


@tool(policy="task")
def three_asks_two_effects(ctx: ToolContext) -> dict[str, Any]:
    """Three questions, two side effects and two durable timers: six runs in all."""
    first = ctx.ask_many({"a": _yes_no("A?")})["a"]
    created = ctx.effect("create", _downstream("create"))
    second = ctx.ask_many({"b": _yes_no("B?")})["b"]
    third = ctx.ask_many({"c": _yes_no("C?")})["c"]
    ctx.sleep("settle", 60)
    published = ctx.effect("publish", _downstream("publish"))
    ctx.sleep("cool-down", 60)
    return {
        "answers": [first.content["ok"], second.content["ok"], third.content["ok"]],
        "created": created,
        "published": published,
    }


@tool(policy="task")
def divergent(ctx: ToolContext) -> str:
    """Takes another path once FLAGS['diverge'] is set: a non-deterministic tool."""
    if FLAGS.get("diverge"):
        ctx.now()
    ctx.ask_many({"a": _yes_no("A?")})
    return "done"


@tool(policy="task")
def divergent_swallowing(ctx: ToolContext) -> str:
    """Diverges like ``divergent`` but swallows every Exception around its steps."""
    try:
        if FLAGS.get("diverge"):
            ctx.now()
        ctx.ask_many({"a": _yes_no("A?")})
    except Exception:
        REACHED.append("swallowed")
    ctx.report("carrying on")
    return "done despite divergence"


@tool(policy="task")
def stable_now(ctx: ToolContext) -> dict[str, Any]:
    """Read the clock, ask, read it again: both must replay to the recorded values."""
    started = ctx.now()
    token = ctx.uuid()
    REACHED.append(f"{started.isoformat()}|{token}")
    ctx.ask_many({"go": _yes_no("Go?")})
    finished = ctx.now()
    return {"started": started.isoformat(), "token": str(token), "finished": finished.isoformat()}


@tool(policy="task")
def swallowing_ask(ctx: ToolContext) -> str:
    """A tool that wraps ctx.ask in ``except Exception``: suspension must get through."""
    try:
        answer = ctx.ask(
            "q", "Proceed?", {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        )
    except Exception:
        REACHED.append("swallowed")
        return "swallowed the suspension"
    return f"answered {answer.action}"


@tool(policy="task")
def cancel_probe(ctx: ToolContext, call: str) -> str:
    """Runs HOOKS['between'] between two ctx calls, then makes ``call``: a safe point."""
    ctx.report("started")
    HOOKS.get("between", lambda: None)()
    REACHED.append("before " + call)
    if call == "report":
        ctx.report("still going")
    elif call == "now":
        ctx.now()
    elif call == "uuid":
        ctx.uuid()
    elif call == "job":
        ctx.job("job-1")
    elif call == "ask":
        ctx.ask_many({"q": _yes_no("Q?")})
    elif call == "effect":
        ctx.effect("side", _downstream("side"))
    elif call == "sleep":
        ctx.sleep("nap", 1)
    elif call == "wait_until":
        ctx.wait_until("ready", lambda: True)
    elif call == "sample":
        ctx.sample("llm", [{"role": "user", "content": {"type": "text", "text": "hi"}}])
    elif call == "roots":
        ctx.roots("roots")
    REACHED.append("after " + call)
    return "not cancelled"


@tool(policy="task", ttl_ms=300_000, poll_interval_ms=500, asks_before_task=True)
def greet_in_task(ctx: ToolContext) -> dict[str, Any]:
    """Ask for a name before the task exists (MRTR), then greet from the task."""
    answer = ctx.ask(
        "user_name",
        "What is your name?",
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        before_task=True,
    )
    ctx.report("computing")
    return {
        "content": [
            {"type": "text", "text": f"Hello, {answer.content['name']}! (computed in task)"}
        ]
    }


# ---- tools of the live tests (tests/live/): real clients over HTTP
LIVE = {"ttl_ms": 600_000, "poll_interval_ms": 200}
SUM_SCHEMA = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}
SLEPT_SCHEMA = {
    "type": "object",
    "properties": {"slept": {"type": "number"}, "label": {"type": "string"}},
    "required": ["slept", "label"],
}


@tool(policy="sync", output_schema=SUM_SCHEMA)
def live_add(ctx: ToolContext, a: int, b: int) -> dict[str, Any]:
    """Add two integers, answered inline."""
    return {"sum": a + b}


@tool(policy="task", output_schema=SLEPT_SCHEMA, **LIVE)
def live_sleep(ctx: ToolContext, seconds: float = 0.5, label: str = "") -> dict[str, Any]:
    """Sleep on a durable timer, then answer with structured content."""
    ctx.report(f"sleeping {seconds}s")
    ctx.sleep("nap", seconds)
    return {"slept": seconds, "label": label}


@tool(policy="task", **LIVE)
def live_confirm(ctx: ToolContext, filename: str = "file.txt") -> str:
    """Ask for confirmation through the client, then pretend to delete."""
    answer = ctx.ask(
        "confirm",
        f"Delete {filename}?",
        {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
    )
    if answer.accepted and answer.content.get("confirm"):
        return f"deleted '{filename}'"
    return f"kept '{filename}' ({answer.action})"


@tool(policy="task", **LIVE)
def live_two_questions(ctx: ToolContext) -> str:
    """Ask two questions at once; answer when both are answered."""
    answers = ctx.ask_many(
        {
            "name": Question(
                message="What is your name?",
                schema={
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            ),
            "color": Question(
                message="Favourite colour?",
                schema={
                    "type": "object",
                    "properties": {"color": {"type": "string"}},
                    "required": ["color"],
                },
            ),
        }
    )
    return f"{answers['name'].content['name']} likes {answers['color'].content['color']}"


@tool(policy="task", **LIVE)
def live_tool_error(ctx: ToolContext) -> str:
    """End with a tool error (a completed task with isError: true)."""
    ctx.report("checking")
    raise ToolError("the backend refused the job")


# ---------------------------------------------------------------- issue 5: fault tests
# tests/faults/ runs this tool in real Celery worker processes and kills them mid-run. The
# downstream (tests/faults/downstream.py) counts every call per idempotency key in PostgreSQL.
@tool(policy="task", ttl_ms=1_800_000)
def fault_steps(
    ctx: ToolContext,
    steps: int = 3,
    sleep_s: float = 0.2,
    work_s: float = 0.1,
    slow_step: int = 0,
    slow_s: float = 0.0,
) -> dict[str, Any]:
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
        outcomes.append(
            ctx.effect(
                f"step-{number}",
                lambda key, payload=payload, work=work: downstream.call(
                    key, payload=payload, work_s=work, attempt=attempt
                ),
                idempotent=True,
            )
        )
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
    response = ctx.sample(
        "question", [{"role": "user", "content": {"type": "text", "text": "2+2?"}}]
    )
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
    answer = ctx.ask("approve", "Approve?", OK_ONLY, audience="operator", forbid_self_approval=True)
    return f"approved={answer.content.get('ok')}"


@tool(
    policy="sync",
    input_schema={
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "dry_run": {"type": "boolean", "x-mcp-header": "Dry-Run"},
            "note": {"type": "string"},
        },
        "additionalProperties": False,
    },
)
def routed(
    ctx: ToolContext,
    region: str | None = None,
    count: int | None = None,
    dry_run: bool | None = None,
    note: str = "",
) -> str:
    """Arguments mirrored into Mcp-Param-* headers (x-mcp-header)."""
    return f"region={region} count={count} dry_run={dry_run} note={note}"


STRUCTURED = {
    "type": "object",
    "properties": {"total": {"type": "integer"}},
    "required": ["total"],
    "additionalProperties": False,
}


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


@tool(
    policy="sync",
    input_schema={
        "type": "object",
        "properties": {"spec": {"$ref": "http://127.0.0.1:9/remote-schema.json"}},
    },
)
def remote_ref(ctx: ToolContext, spec: Any = None) -> str:
    """An inputSchema with a network $ref, which must never be fetched."""
    PROTOCOL_PROBES["remote_ref.runs"] += 1
    return "ran"


@tool(policy="task", ttl_ms=300_000, poll_interval_ms=500, asks_before_task=True)
def confirm_before_task(ctx: ToolContext, item: str = "x") -> str:
    """Confirm before the task exists (MRTR), then work in a task."""
    answer = ctx.ask("go", f"Queue {item}?", OK_ONLY, before_task=True)
    return f"queued {item}: {answer.content.get('ok')}"


@tool(policy="task", on_input_timeout="answer", max_input_wait_s=30)
def ask_with_timeout_answer(ctx: ToolContext) -> str:
    """Ask once; a timed-out wait is handed back to the tool as an answer."""
    answer = ctx.ask("go", "Go?", {"type": "object", "properties": {"go": {"type": "boolean"}}})
    return answer.action


@tool(policy="task")
def many_questions(ctx: ToolContext, count: int = 10) -> str:
    """Ask `count` questions at once (benchmarks answer them one at a time)."""
    from mcptasks.tools import Question

    answers = ctx.ask_many(
        {
            f"q{n}": Question(
                message=f"Question {n}?",
                schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
            )
            for n in range(count)
        }
    )
    return f"{len(answers)} answered"


@tool(policy="sync")
def secret_question(ctx: ToolContext) -> str:
    """Breaks the form rule (issue 3 tests): asks for a password in a form elicitation."""
    ctx.ask(
        "login",
        "Log in to the registry",
        {
            "type": "object",
            "properties": {"username": {"type": "string"}, "password": {"type": "string"}},
        },
    )
    return "unreachable"


# ---------------------------------------------------------------- issue 6: effects, approvals
# tests/effects/ and scripts/effect_crash_loop.py kill a worker at a marked point of
# effect_crash's first effect (tests/effects/downstream.py: the demo's fake cloud plus marks).
@tool(policy="task", ttl_ms=1_800_000)
def effect_crash(
    ctx: ToolContext, idempotent: bool = True, hold: str = "", hold_s: float = 60.0
) -> dict[str, Any]:
    """Charge through the fake cloud (holding the first time at ``hold``: "before" or "after"
    the downstream call), then record an idempotent receipt: the step after it."""
    from tests.effects.downstream import cloud

    charge = ctx.effect(
        "charge", lambda key: cloud.charge(key, hold=hold, hold_s=hold_s), idempotent=idempotent
    )
    receipt = ctx.effect("receipt", lambda key: cloud.charge(key), idempotent=True)
    return {"charge": charge, "receipt": receipt}


# tests/effects/endings.py: an effect left open while the task waits for an answer that never
# comes (the input-timeout end of a task with an open effect).
@tool(policy="task", ttl_ms=1_800_000)
def effect_asks(ctx: ToolContext, hold: str = "before", timeout_s: float = 1.0) -> dict[str, Any]:
    """A non-idempotent charge that asks for a confirmation in the middle of its call:
    ``hold`` "before" asks before the downstream call, "after" once the charge is applied."""
    from tests.effects.downstream import cloud

    def charge(key: str) -> dict[str, Any]:
        if hold == "before":
            ctx.ask("confirm", "Charge?", OK_ONLY, audience="operator", timeout_s=timeout_s)
        result = cloud.charge(key)
        if hold == "after":
            ctx.ask(
                "confirm", "Keep the charge?", OK_ONLY, audience="operator", timeout_s=timeout_s
            )
        return result

    return {"charge": ctx.effect("charge", charge)}


@tool(policy="task", asks_before_task=True)
def slow_before_task(ctx: ToolContext) -> str:
    """Computes for ever before its first question (tests/tasks/test_bounded.py)."""
    import time

    while True:
        time.sleep(0.05)


# tests/tasks/test_bounded.py: a step that ignores cancellation (never calls ctx again), and a
# durable wait with a timeout.
@tool(policy="task", max_run_s=1.0)
def ignores_cancel(ctx: ToolContext, in_effect: bool = False) -> str:
    """Spin for ever (sleeping 50 ms at a time), optionally inside a non-idempotent effect."""
    import time

    def spin(key: str) -> None:
        while True:
            time.sleep(0.05)

    if in_effect:
        ctx.effect("spin", spin)
    else:
        spin("")
    return "never"


@tool(policy="task")
def waits_with_timeout(ctx: ToolContext, timeout_s: float = 5.0, catch: bool = False) -> str:
    """Wait for a condition that never holds, with a timeout; optionally handle the timeout."""
    from mcptasks.tools import WaitTimedOut

    try:
        ctx.wait_until("never", lambda: False, every=1.0, timeout_s=timeout_s)
    except WaitTimedOut as exc:
        if not catch:
            raise
        return f"handled: {exc}"
    return "done"


@tool(policy="task")
def any_self_approval_gate(ctx: ToolContext) -> str:
    """An approval anyone with the right may give on any channel (MCP included) — but never
    the requester (audience ``any``, no self-approval)."""
    answer = ctx.ask("approval", "Approve?", OK_ONLY, audience="any", forbid_self_approval=True)
    return f"approved={answer.content.get('ok')}"


@tool(policy="task")
def resume_across_builds(ctx: ToolContext) -> str:
    """Ask the client once; resumes under whatever build answers (the default rule)."""
    ctx.ask("go", "Go on?", OK_ONLY)
    return "resumed"


@tool(policy="task", on_build_change="fail")
def resume_same_build_only(ctx: ToolContext) -> str:
    """Ask the client once; refuses to resume under another server build or policy."""
    ctx.ask("go", "Go on?", OK_ONLY)
    return "resumed"


@tool(policy="task")
def asks_for_a_password(ctx: ToolContext) -> str:
    """Misdefined on purpose: a form may never ask for a secret."""
    answer = ctx.ask(
        "login", "Log in", {"type": "object", "properties": {"password": {"type": "string"}}}
    )
    return answer.action


# ---------------------------------------------------------------- issue 25: progress, fallback
@tool(policy="auto")
def counts_with_progress(ctx: ToolContext, steps: int = 3) -> str:
    """Report progress 1..steps of steps, then a report that does not advance (sends nothing)
    and one without a progress value (a status message only); as a task, durably sleep after
    the reports so its statusMessage can be read."""
    for number in range(1, steps + 1):
        ctx.report(f"step {number} of {steps}", progress=number, total=steps)
    if steps:
        ctx.report("still at the end", progress=steps, total=steps)
    ctx.report("resting")
    ctx.sleep("rest", 0.01 if steps < 100 else 60)
    return f"counted {steps}"


@tool(policy="auto")
def reports_bad_progress(ctx: ToolContext) -> str:
    """Misdefined on purpose: progress must be a number (inline and as a task)."""
    ctx.report("oops", progress="half")  # type: ignore[arg-type]
    return "unreachable"


@tool(policy="task", task_fallback=True, poll_interval_ms=200)
def nap_with_fallback(ctx: ToolContext, seconds: float = 0.1) -> str:
    """Sleep durably; a client without the tasks extension gets the fallback result."""
    ctx.report("napping")
    ctx.sleep("nap", seconds)
    return f"napped {seconds}s"


# ---------------------------------------------------------------- issue 22: fair share, progress
@tool(policy="task")
def report_stages(
    ctx: ToolContext, durations: list[float], sleep_after: list[int] | None = None
) -> dict[str, Any]:
    """Report ``stage n/N`` for each duration, then work (no ctx call) that long; after the
    stages listed in ``sleep_after`` sleep durably for a second (the next run replays).

    Returns when each stage was first reported (``ctx.now()``: replays return the recorded
    time), so a test can tell how old the message it saw was."""
    import time as time_module

    reported = []
    for number, seconds in enumerate(durations, start=1):
        ctx.report(f"stage {number}/{len(durations)}")
        reported.append(ctx.now().timestamp())
        time_module.sleep(seconds)
        if number in (sleep_after or []):
            ctx.sleep(f"after-{number}", 1.0)
    return {"reported": reported}


@tool(policy="task")
def hold_worker(ctx: ToolContext, seconds: float = 3.0) -> str:
    """Hold a worker slot for ``seconds`` of work (no durable sleep: the slot stays taken)."""
    import time as time_module

    ctx.report("working")
    time_module.sleep(seconds)
    return "held"


@tool(policy="task")
def charge_then_ship(ctx: ToolContext, order: str = "o-1") -> dict[str, Any]:
    """Charge (a non-idempotent effect), then ship (idempotent), whose downstream raises
    ``ValueError`` while ``FLAGS["ship_fails"]`` is set."""

    def ship(key: str) -> dict[str, Any]:
        EFFECT_CALLS["ship"] += 1
        if FLAGS.get("ship_fails"):
            raise ValueError(f"warehouse rejected order {order}")
        return {"shipped": order}

    charged = ctx.effect("charge", _downstream("charge"))
    shipped = ctx.effect("ship", ship, idempotent=True)
    return {"charged": charged, "shipped": shipped}


# ---------------------------------------------------------------- issue 22: one trace per task
@tool(policy="task", ttl_ms=600_000)
def traced_pipeline(ctx: ToolContext, nap_s: float = 1.0) -> dict[str, Any]:
    """Steps of every kind the trace shows: a recorded uuid, an effect, a durable sleep (the
    task resumes in a new attempt), a second effect."""
    run_id = str(ctx.uuid())
    built = ctx.effect("build", lambda key: {"built": str(key)}, idempotent=True)
    ctx.sleep("cool-down", nap_s)
    shipped = ctx.effect("ship", lambda key: {"shipped": str(key)})
    return {"run": run_id, "built": built, "shipped": shipped}
