"""Invariant checks of the fault tests: task rows, recorded outcomes against the fake
downstream, audit chains, leases, and a trigger log of who wrote which row."""

from __future__ import annotations

from typing import Any


# ---------------------------------------------------------------- tasks
def task_rows(task_ids: list[str]) -> dict[str, dict[str, Any]]:
    from mcptasks.models import Task

    return {
        row["id"]: dict(row)
        for row in Task.objects.filter(pk__in=task_ids).values(
            "id",
            "state",
            "attempt",
            "version",
            "result",
            "error",
            "lease_owner",
            "lease_expires_at",
            "cancel_requested_at",
            "wake_at",
            "updated_at",
        )
    }


def states(task_ids: list[str]) -> dict[str, str]:
    from mcptasks.models import Task

    return dict(Task.objects.filter(pk__in=task_ids).values_list("id", "state"))


def all_terminal(task_ids: list[str]) -> bool:
    from mcptasks.models import TERMINAL_STATES

    found = states(task_ids)
    return len(found) == len(task_ids) and all(s in TERMINAL_STATES for s in found.values())


def lease_pid(lease_owner: str) -> int | None:
    """The pid in a lease owner ``host:pid:thread`` (runner.worker_name)."""
    parts = lease_owner.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


# ---------------------------------------------------------------- invariants
def unsealed_audit_events() -> tuple[int, int]:
    """Audit events not sealed yet (audit/seal.py): how many, and how many of them are older
    than the seal bound (what ``verify_audit`` would call late)."""
    from datetime import timedelta

    from django.utils import timezone

    from audit.models import AuditEvent
    from audit.seal import seal_bound_s

    unsealed = AuditEvent.objects.filter(seq__isnull=True)
    cutoff = timezone.now() - timedelta(seconds=seal_bound_s())
    return unsealed.count(), unsealed.filter(created_at__lt=cutoff).count()


def audit_gaps() -> list[str]:
    """Every chain's events numbered 1..n without a gap, each linked to the one before, and
    its head at n — after sealing what was left unsealed (audit/seal.py; the sweep's backstop
    does the same), as a reader would wait for it; an event that cannot be sealed is a problem."""
    from audit.chain import GENESIS_HASH, body_of_event, link_hash
    from audit.models import AuditEvent, ChainHead
    from audit.seal import seal_pending

    seal_pending()
    problems = [
        f"{chain}: event id {pk} left unsealed"
        for pk, chain in AuditEvent.objects.filter(seq__isnull=True).values_list("pk", "chain")
    ]
    heads = dict(ChainHead.objects.values_list("chain", "seq"))
    chains = set(AuditEvent.objects.values_list("chain", flat=True).distinct())
    for chain in sorted(chains | set(heads)):
        previous = GENESIS_HASH
        expected = 1
        for event in (
            AuditEvent.objects.filter(chain=chain, seq__isnull=False).order_by("seq").iterator()
        ):
            seq, prev_hash, stored = event.seq or 0, event.prev_hash or "", event.hash or ""
            if seq != expected:
                problems.append(f"{chain}: seq {expected} missing (next is {seq})")
                expected = seq
            if prev_hash != previous:
                problems.append(f"{chain}#{seq}: prev_hash does not link")
            body = body_of_event(event)
            if link_hash(prev_hash, body) != stored:
                problems.append(f"{chain}#{seq}: hash does not match its content")
            previous = stored
            expected += 1
        if heads.get(chain, 0) != expected - 1:
            problems.append(f"{chain}: head at {heads.get(chain)} but {expected - 1} events")
    return problems


def task_audit(task_ids: list[str]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    from audit.models import AuditEvent

    trail: dict[str, list[tuple[str, dict[str, Any]]]] = {task_id: [] for task_id in task_ids}
    for task_id, action, data in (
        AuditEvent.objects.filter(task_id__in=task_ids)
        .order_by("chain", "seq")
        .values_list("task_id", "action", "data")
    ):
        trail[task_id].append((action, data))
    return trail


def task_timeline(task_id: str) -> list[tuple[Any, str, dict[str, Any]]]:
    from audit.models import AuditEvent

    return list(
        AuditEvent.objects.filter(task_id=task_id)
        .order_by("seq")
        .values_list("created_at", "action", "data")
    )


def attempt_problems(
    task_id: str, row: dict[str, Any], trail: list[tuple[str, dict[str, Any]]]
) -> list[str]:
    """Each claim audited once, attempts 1..n in order, n the row's attempt."""
    attempts = [data.get("attempt") for action, data in trail if action == "task.started"]
    if attempts != list(range(1, len(attempts) + 1)) or attempts[-1:] != [row["attempt"]]:
        return [f"{task_id}: claims audited with attempts {attempts}, row at {row['attempt']}"]
    return []


def dropped_effects(task_ids: list[str]) -> list[str]:
    """Effects left ``intended`` on a task that ended, or ``unknown`` with no ``effect.unknown``
    audited: outcomes nobody will ever decide (issue 20). Empty: none dropped."""
    from audit.models import AuditEvent
    from mcptasks.models import TERMINAL_STATES, Effect, EffectState

    found = [
        f"{task_id}: effect {step} left intended on a {state} task"
        for task_id, step, state in Effect.objects.filter(
            task_id__in=task_ids, state=EffectState.INTENDED, task__state__in=TERMINAL_STATES
        ).values_list("task_id", "step", "task__state")
    ]
    audited = {
        (task_id, (data or {}).get("step"))
        for task_id, data in AuditEvent.objects.filter(
            task_id__in=task_ids, action="effect.unknown"
        ).values_list("task_id", "data")
    }
    found += [
        f"{task_id}: effect {step} unknown but never audited as such"
        for task_id, step in Effect.objects.filter(
            task_id__in=task_ids, state=EffectState.UNKNOWN
        ).values_list("task_id", "step")
        if (task_id, step) not in audited
    ]
    return found


def unknown_effects(task_ids: list[str]) -> int:
    from mcptasks.models import Effect, EffectState

    return Effect.objects.filter(task_id__in=task_ids, state=EffectState.UNKNOWN).count()


def outcome_problems(task_ids: list[str], conn: Any, *, steps: int, sleeps: bool) -> list[str]:
    """Every completed ``fault_steps`` task kept each step's recorded outcome.

    The effects are applied with the downstream's result for their key, the task's result
    carries those same results, and each payload holds the token of the recorded uuid step.
    """
    from mcptasks.models import Effect, EffectState, TaskStep
    from tests.faults import downstream

    problems = []
    rows = task_rows(task_ids)
    applied = downstream.applied(conn, task_ids)
    calls = downstream.calls_per_key(conn, task_ids)
    effects = {
        (e["task_id"], e["step"]): e
        for e in Effect.objects.filter(task_id__in=task_ids).values(
            "task_id", "step", "state", "result"
        )
    }
    recorded = {
        (s["task_id"], s["key"]): s["value"]
        for s in TaskStep.objects.filter(task_id__in=task_ids).values("task_id", "key", "value")
    }
    trails = task_audit(task_ids)
    for task_id in task_ids:
        row = rows.get(task_id)
        if row is None:
            problems.append(f"{task_id}: row lost")
            continue
        if row["state"] != "completed":
            problems.append(f"{task_id}: ended {row['state']} ({row['error']})")
            continue
        content = (row["result"] or {}).get("structuredContent") or {}
        token = recorded.get((task_id, "uuid#1"))
        if content.get("token") != token or token is None:
            problems.append(f"{task_id}: result token {content.get('token')} != step {token}")
        expected_keys = ["uuid#1", "now#1"] + [f"pause-{n}" for n in range(1, steps) if sleeps]
        for key in expected_keys:
            if (task_id, key) not in recorded:
                problems.append(f"{task_id}: recorded step {key} lost")
        if len(content.get("steps") or []) != steps:
            problems.append(f"{task_id}: result has {len(content.get('steps') or [])} steps")
            continue
        for number in range(1, steps + 1):
            step, key = f"step-{number}", f"{task_id}:step-{number}"
            effect = effects.get((task_id, step))
            truth = applied.get(key)
            if truth is None or calls.get(key, 0) < 1:
                problems.append(f"{task_id}: {step} never reached the downstream")
                continue
            if effect is None or effect["state"] != EffectState.APPLIED:
                problems.append(f"{task_id}: {step} effect is {effect and effect['state']}")
            elif effect["result"] != truth:
                problems.append(
                    f"{task_id}: {step} recorded {effect['result']} but the "
                    f"downstream applied {truth}"
                )
            if content["steps"][number - 1] != truth:
                problems.append(f"{task_id}: {step} result differs from the downstream's")
            if truth["payload"].get("token") != token:
                problems.append(
                    f"{task_id}: {step} applied with token "
                    f"{truth['payload'].get('token')}, recorded {token}"
                )
        trail = trails[task_id]
        problems += attempt_problems(task_id, row, trail)
        if [a for a, _ in trail].count("task.completed") != 1 or trail[-1][0] != "task.completed":
            problems.append(f"{task_id}: audit trail ends {[a for a, _ in trail][-3:]}")
    return problems


def db_now() -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def orphaned_leases(grace_s: float) -> list[str]:
    """Running tasks whose lease expired more than ``grace_s`` ago (database clock)."""
    from datetime import timedelta

    from django.db.models.functions import Now

    from mcptasks.models import Task

    return list(
        Task.objects.filter(
            state="running", lease_expires_at__lt=Now() - timedelta(seconds=grace_s)
        ).values_list("pk", flat=True)
    )


def diagnosis(task_id: str, since: float) -> str:
    """The task's row and audit trail (seconds from ``since``), for a failure message."""
    row = task_rows([task_id]).get(task_id, {})
    lines = [
        f"    row: { ({k: row.get(k) for k in ('state', 'attempt', 'lease_owner')}) } "
        f"lease expires {_offset(row.get('lease_expires_at'), since)}, updated "
        f"{_offset(row.get('updated_at'), since)}, database clock "
        f"{_offset(db_now(), since)}"
    ]
    lines += [
        f"    {at.timestamp() - since:+.2f} {action} {data.get('attempt', '')}"
        for at, action, data in task_timeline(task_id)
    ]
    return "\n".join(lines)


def _offset(moment: Any, since: float) -> str:
    return "-" if moment is None else f"{moment.timestamp() - since:+.2f}"


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def figures(values: list[float]) -> str:
    if not values:
        return "n=0"
    return (
        f"n={len(values)} min={min(values):.2f} median={percentile(values, 0.5):.2f} "
        f"p95={percentile(values, 0.95):.2f} max={max(values):.2f} s"
    )


# ---------------------------------------------------------------- who wrote what
WRITE_LOG = "fault_write_log"
LOGGED_TABLES = (
    "mcptasks_task",
    "mcptasks_taskstep",
    "mcptasks_effect",
    "mcptasks_inputrequest",
    "audit_auditevent",
)


def install_write_log(conn: Any) -> None:
    """Log every row a write touches in the task tables, with the backend that wrote it.

    A fenced UPDATE that matches no row fires no row trigger, so the log holds exactly the
    writes the database accepted.
    """
    conn.execute(f"""CREATE TABLE IF NOT EXISTS {WRITE_LOG} (
        id bigserial PRIMARY KEY, tbl text NOT NULL, op text NOT NULL, app text NOT NULL,
        backend integer NOT NULL, task_id text,
        at timestamptz NOT NULL DEFAULT clock_timestamp())""")
    conn.execute(f"TRUNCATE {WRITE_LOG}")
    conn.execute(f"""CREATE OR REPLACE FUNCTION fault_log_write() RETURNS trigger AS $$
        BEGIN
            INSERT INTO {WRITE_LOG} (tbl, op, app, backend, task_id)
            VALUES (TG_TABLE_NAME, TG_OP, current_setting('application_name'),
                    pg_backend_pid(),
                    coalesce(to_jsonb(NEW) ->> 'task_id', to_jsonb(NEW) ->> 'id'));
            RETURN NULL;
        END $$ LANGUAGE plpgsql""")
    for table in LOGGED_TABLES:
        conn.execute(f"DROP TRIGGER IF EXISTS fault_log_write ON {table}")
        conn.execute(
            f"CREATE TRIGGER fault_log_write AFTER INSERT OR UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION fault_log_write()"
        )


def remove_write_log(conn: Any) -> None:
    for table in LOGGED_TABLES:
        conn.execute(f"DROP TRIGGER IF EXISTS fault_log_write ON {table}")
    conn.execute("DROP FUNCTION IF EXISTS fault_log_write()")
    conn.execute(f"DROP TABLE IF EXISTS {WRITE_LOG}")


def backends_of(conn: Any, app_name: str) -> list[int]:
    """The PostgreSQL backends of one worker's connections to the current database."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s",
        (app_name,),
    ).fetchall()
    return [pid for (pid,) in rows]
