"""The application's PostgreSQL role (mcptasks/dbroles.py, docs/operations.md "Database roles"):
it inserts and reads audit rows and runs retention, but cannot UPDATE, DELETE, TRUNCATE or
disable the triggers of the append-only audit tables."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from audit.chain import verify_chain
from audit.models import AuditEvent
from mcptasks.dbroles import grant_app_role
from tests.scratch_db import run_django

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]
ACME = "tenant:acme"
APPEND_ONLY = ("audit_auditevent", "audit_retentioncheckpoint")


def role_url(role: str, password: str) -> str:
    db = connection.settings_dict
    return (
        f"postgres://{role}:{password}@{db.get('HOST') or '127.0.0.1'}:"
        f"{db.get('PORT') or 5432}/{db['NAME']}"
    )


@pytest.fixture
def app_role(transactional_db: None, settings: Any) -> Iterator[tuple[str, str]]:
    """A LOGIN role of this test run, granted by `migrate` as the app role; dropped after."""
    role, password = f"mcptasks_test_app_{os.getpid()}", secrets.token_urlsafe(18)
    with connection.cursor() as cursor:
        # DDL takes no bound values: the password is quoted into the statement client-side.
        cursor.execute(
            connection.ops.compose_sql(f"CREATE ROLE {role} LOGIN PASSWORD %s", [password])
        )
    settings.MCPTASKS_DB_APP_ROLE = role
    try:
        yield role, password
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")


@pytest.fixture
def as_app(app_role: tuple[str, str]) -> Iterator[psycopg.Connection[Any]]:
    out = StringIO()
    call_command("migrate", verbosity=1, stdout=out)
    assert f"Granted the application role {app_role[0]!r}" in out.getvalue()
    conn = psycopg.connect(role_url(*app_role), autocommit=True)
    yield conn
    conn.close()


def refused(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> str:
    """Run ``sql`` as the app role in a transaction of its own; the database's refusal."""
    with pytest.raises(psycopg.Error) as caught, conn.transaction():
        conn.execute(sql, params)
    return str(caught.value)


def test_app_role_cannot_truncate_or_disable_the_audit_triggers(
    as_app: psycopg.Connection[Any], record_events: Callable[..., Any]
) -> None:
    record_events(3)
    for table in APPEND_ONLY:
        assert f"permission denied for table {table}" in refused(as_app, f"TRUNCATE {table}")
        assert f"must be owner of table {table}" in refused(
            as_app, f"ALTER TABLE {table} DISABLE TRIGGER USER"
        )
        assert f"must be owner of table {table}" in refused(
            as_app, f"ALTER TABLE {table} DISABLE TRIGGER ALL"
        )
        assert f"permission denied for table {table}" in refused(
            as_app, f"UPDATE {table} SET seq = seq"
        )
        assert f"permission denied for table {table}" in refused(as_app, f"DELETE FROM {table}")
    # The retention setting opens the trigger, not the privilege.
    with pytest.raises(psycopg.errors.InsufficientPrivilege), as_app.transaction():
        as_app.execute("SET LOCAL mcptasks.audit_retention = 'on'")
        as_app.execute("DELETE FROM audit_auditevent")
    assert AuditEvent.objects.filter(chain=ACME).count() == 3
    assert verify_chain(ACME).ok


def test_app_role_cannot_change_events_through_a_partition_even_one_made_later(
    as_app: psycopg.Connection[Any], record_events: Callable[..., Any]
) -> None:
    """The events' partitions (audit migration 0008) grant the app role nothing: it reaches
    rows through the partitioned table, whose triggers and grants hold for every partition,
    including those the sweep creates later through audit_ensure_partitions."""
    record_events(2)
    created = [row[0] for row in as_app.execute("SELECT audit_ensure_partitions(7)").fetchall()]
    try:
        assert created  # months the migration did not create
        names = [row[0] for row in as_app.execute("SELECT name FROM audit_partitions()")]
        assert set(created) < set(names) and "audit_auditevent_legacy" in names
        for table in names:
            for sql in (
                f"UPDATE {table} SET seq = seq",
                f"DELETE FROM {table}",
                f"TRUNCATE {table}",
                f"INSERT INTO {table} SELECT * FROM {table}",
            ):
                assert f"permission denied for table {table}" in refused(as_app, sql)
            assert f"must be owner of table {table}" in refused(as_app, f"DROP TABLE {table}")
            assert "must be owner" in refused(
                as_app, f"ALTER TABLE audit_auditevent DETACH PARTITION {table}"
            )
        # Retention's drop function refuses a partition it must not drop.
        assert "not in the purge" in refused(
            as_app,
            "SELECT * FROM audit_drop_partition('audit_auditevent_legacy', %s::varchar[],"
            " %s::bigint[], %s::timestamptz[])",
            [[ACME], [1], [timezone.now()]],
        )
        assert AuditEvent.objects.filter(chain=ACME).count() == 2
        assert verify_chain(ACME).ok
    finally:  # the test database outlives this test: the months it added go again
        with connection.cursor() as cursor:
            for table in created:
                cursor.execute(f"DROP TABLE {table}")


def test_app_role_inserts_and_reads_audit_rows(
    as_app: psycopg.Connection[Any], record_events: Callable[..., Any]
) -> None:
    record_events(2)
    rows = as_app.execute(
        "SELECT seq, action FROM audit_auditevent WHERE chain = %s ORDER BY seq", [ACME]
    ).fetchall()
    assert rows == [(1, "task.created"), (2, "task.created")]
    with as_app.transaction(force_rollback=True):
        as_app.execute(
            "INSERT INTO audit_auditevent (chain, seq, created_at, tenant_id, actor_kind,"
            " actor_id, actor_display, action, task_id, data, request_id, prev_hash, hash)"
            " SELECT chain, seq + 1, now(), tenant_id, actor_kind, actor_id, actor_display,"
            " action, task_id, data, request_id, hash, hash FROM audit_auditevent"
            " WHERE chain = %s AND seq = 2",
            [ACME],
        )
        inserted = as_app.execute(
            "SELECT count(*) FROM audit_auditevent WHERE chain = %s", [ACME]
        ).fetchone()
        assert inserted == (3,)


def test_app_role_purge_function_refuses_events_not_older_than_the_cutoff(
    as_app: psycopg.Connection[Any], record_events: Callable[..., Any]
) -> None:
    record_events(2)
    assert "not all older than" in refused(
        as_app,
        "SELECT audit_purge_prefix(%s, %s, %s)",
        [ACME, 2, timezone.now() - timedelta(days=1)],
    )
    assert AuditEvent.objects.filter(chain=ACME).count() == 2


def test_retention_runs_as_the_app_role(
    app_role: tuple[str, str], as_app: psycopg.Connection[Any], cast: Any, tmp_path: Path
) -> None:
    """The app role records events (the writer's INSERT and chain-head UPDATE) and purges them
    through the retention path, in a process of its own connected as that role."""
    script = (
        "import json, django; django.setup()\n"
        "from datetime import timedelta\n"
        "from django.utils import timezone\n"
        "from audit.chain import verify_chain\n"
        "from audit.record import Actor, record\n"
        "from audit.retention import purge_tenant\n"
        "from mcptasks.models import Tenant\n"
        "tenant = Tenant.objects.get(slug='acme')\n"
        "for n in range(3):\n"
        "    record(action='task.created', actor=Actor.system('test'), tenant_id=tenant.pk,\n"
        "           tenant_slug='acme', data={'n': n})\n"
        "result = purge_tenant(tenant_slug='acme', older_than_days=1, actor=Actor.system('test'),\n"
        "                      now=timezone.now() + timedelta(days=2))\n"
        "print(json.dumps({'purged': result.purged, 'ok': verify_chain('tenant:acme').ok}))\n"
    )
    stdout = run_django(role_url(*app_role), tmp_path, "-c", script)
    outcome = json.loads(stdout.strip().splitlines()[-1])
    assert outcome["ok"] is True
    assert outcome["purged"] >= 3  # the three events and whatever the cast's seeding recorded
    actions = list(
        AuditEvent.objects.filter(chain=ACME).order_by("seq").values_list("action", flat=True)
    )
    assert actions == ["audit.purged"]
    assert verify_chain(ACME).ok


def test_the_app_role_seals_batched_events_and_still_cannot_update_them(
    app_role: tuple[str, str], as_app: psycopg.Connection[Any], cast: Any, tmp_path: Path
) -> None:
    """With sealing after commit the app role inserts unsealed events and seals them through
    audit_seal_events (EXECUTE granted by migrate), in a process of its own; a direct UPDATE
    stays refused."""
    script = (
        "import json, django; django.setup()\n"
        "from audit.chain import verify_chain\n"
        "from audit.record import Actor, record\n"
        "from audit.seal import seal_pending\n"
        "from mcptasks.models import Tenant\n"
        "tenant = Tenant.objects.get(slug='acme')\n"
        "events = [record(action='task.created', actor=Actor.system('test'),\n"
        "                 tenant_id=tenant.pk, tenant_slug='acme', data={'n': n})\n"
        "          for n in range(3)]\n"
        "unsealed = sum(1 for e in events if e.seq is None)\n"
        "seal_pending()\n"
        "report = verify_chain('tenant:acme')\n"
        "print(json.dumps({'unsealed': unsealed, 'ok': report.ok, 'left': report.unsealed}))\n"
    )
    stdout = run_django(
        role_url(*app_role), tmp_path, "-c", script, MCPTASKS_AUDIT_SEAL_DELAY_MS="100"
    )
    outcome = json.loads(stdout.strip().splitlines()[-1])
    assert outcome == {"unsealed": 3, "ok": True, "left": 0}
    assert "permission denied for table audit_auditevent" in refused(
        as_app, "UPDATE audit_auditevent SET seq = seq"
    )
    assert verify_chain(ACME).ok


def test_a_superuser_is_refused_as_the_app_role(transactional_db: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
    with pytest.raises(ImproperlyConfigured, match="superuser or the role running"):
        grant_app_role(connection, owner)
    with pytest.raises(ImproperlyConfigured, match="no role"):
        grant_app_role(connection, "mcptasks_no_such_role")
    with pytest.raises(ImproperlyConfigured, match="plain role name"):
        grant_app_role(connection, 'x"; DROP TABLE audit_auditevent; --')


def test_the_app_role_drops_a_due_day_of_tasks_and_cannot_touch_a_partition(
    app_role: tuple[str, str],
    as_app: psycopg.Connection[Any],
    make_task: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """The task table's day partitions (mcptasks migration 0016) grant the app role nothing
    either; it creates days ahead and drops a due day only through the two functions, in a
    process of its own connected as that role."""
    import time_machine

    from mcptasks import lifecycle, task_partitions

    day = timezone.now().date() - timedelta(days=3)
    past = task_partitions.attach_day(day)  # as the owner: the ensure function makes today's on
    with time_machine.travel(timezone.now() - timedelta(days=3), tick=False):
        task = make_task(ttl_ms=60_000)
        lifecycle.task_claim(task_id=task.pk, worker="w1")
        lifecycle.task_complete(task_id=task.pk, attempt=1, result={"content": []})
    created = [
        row[0] for row in as_app.execute("SELECT mcptasks_task_ensure_partitions(9)").fetchall()
    ]
    try:
        assert len(created) == 2  # the two days past the migration's seven
        for table in (past, "mcptasks_task_legacy", created[0]):
            for sql in (f"UPDATE {table} SET state = state", f"DELETE FROM {table}"):
                assert f"permission denied for table {table}" in refused(as_app, sql)
            assert f"must be owner of table {table}" in refused(as_app, f"DROP TABLE {table}")
        assert "not a day partition" in refused(
            as_app, "SELECT mcptasks_task_partition_purge('mcptasks_task_legacy', now(), true)"
        )
        script = (
            "import json, django; django.setup()\n"
            "from django.conf import settings\n"
            "settings.MCPTASKS_TASK_PARTITION_PURGE = True\n"
            "from mcptasks import lifecycle\n"
            "print(json.dumps(lifecycle.task_purge_days()))\n"
        )
        stdout = run_django(role_url(*app_role), tmp_path, "-c", script)
        assert json.loads(stdout.strip().splitlines()[-1]) == [[past, 1]]
        assert AuditEvent.objects.filter(action="task.purged", task_id=task.pk).count() == 1
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s)", [past])
            assert cursor.fetchone()[0] is None
    finally:  # the test database outlives this test: the days it added go again
        with connection.cursor() as cursor:
            for table in [*created, past]:
                cursor.execute("SELECT to_regclass(%s)", [table])
                if cursor.fetchone()[0] is not None:
                    cursor.execute(f"ALTER TABLE mcptasks_task DETACH PARTITION {table}")
                    cursor.execute(f"DROP TABLE {table}")
