"""Web, Celery worker and beat processes behind a real PgBouncer in transaction mode (issue 23).

PgBouncer 1.18 (Debian's) runs in front of the test database with ``pool_mode = transaction``
and two server connections for every client, so consecutive transactions of one process land
on different server connections; its server connections default to a non-UTC TimeZone, so a
process that relied on asking for UTC at connect would show it. With ``MCPTASKS_DB_POOLER=
pgbouncer`` tasks are created, polled (on the fast ``tasks/get`` path too), completed by the
worker and cancelled, and every audit chain verifies. Without it the fast path cannot connect
at all (PgBouncer refuses its ``options`` startup parameter) and every poll waits for its pool
before the general path answers; with prepared statements turned back on, its statement is
prepared on one server connection and looked for on another.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from django.db import connection

from audit.models import AuditEvent
from mcptasks.models import Task, TaskState
from tests.faults.harness import wait_for
from tests.live.conftest import stop
from tests.production.processes import (
    BIN,
    REPO,
    Stack,
    free_port,
    private_redis,
    running_stack,
    stack_env,
)
from tests.production.test_scale_out import create, post, wait_terminal

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.pgbouncer,
    pytest.mark.django_db(transaction=True),
]
SERVER_POOL_SIZE = 2
SERVER_TIMEZONE = "Asia/Kolkata"  # what PgBouncer's server connections start with
TERMINAL = ("completed", "failed", "cancelled")


@contextmanager
def pgbouncer(workdir: Path, settings_dict: dict[str, Any]) -> Iterator[str]:
    """A pgbouncer of the test's own on a free port, in front of the test database; yields the
    DATABASE_URL that goes through it. Ended by pid."""
    port = free_port()
    user = settings_dict.get("USER") or "postgres"
    password = settings_dict.get("PASSWORD") or ""
    name = settings_dict["NAME"]
    server = (
        f"host={settings_dict.get('HOST') or '127.0.0.1'} port={settings_dict.get('PORT') or 5432}"
        f" dbname={name} user={user} timezone={SERVER_TIMEZONE}"
        + (f" password={password}" if password else "")
    )
    (workdir / "users.txt").write_text(f'"{user}" "{password}"\n')
    (workdir / "pgbouncer.ini").write_text(
        f"[databases]\n{name} = {server}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {SERVER_POOL_SIZE}\n"
        "max_client_conn = 500\nreserve_pool_size = 0\n"
        # Idle server connections taken in turn, not the last one used: a client's next
        # transaction lands on another server connection whenever one is idle.
        "server_round_robin = 1\n"
    )
    # PgBouncer refuses to run as root; it reads its files first, then becomes postgres.
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    log = open(workdir / "pgbouncer.log", "w")  # noqa: SIM115 - closed after the process
    process = subprocess.Popen(
        ["pgbouncer", *as_user, str(workdir / "pgbouncer.ini")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"postgres://{user}{':' + password if password else ''}@127.0.0.1:{port}/{name}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with psycopg.connect(url, connect_timeout=2):
                    break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(
                        f"pgbouncer did not start:\n{(workdir / 'pgbouncer.log').read_text()}"
                    ) from None
                time.sleep(0.1)
        yield url
    finally:
        stop(process)
        log.close()


@pytest.fixture(scope="module")
def bounced(tmp_path_factory, django_db_setup) -> Iterator[Stack]:
    """Web, two Celery workers and beat, every one of them on PostgreSQL through PgBouncer."""
    tmp_path = tmp_path_factory.mktemp("pgbouncer")
    with (
        private_redis(tmp_path) as redis,
        pgbouncer(tmp_path, connection.settings_dict) as url,
    ):
        env = {**stack_env(tmp_path, url, redis.url(0)), "MCPTASKS_DB_POOLER": "pgbouncer"}
        with running_stack(env, tmp_path, ("web",), ("worker1", "worker2")) as stack:
            yield stack


def answered(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.findall(r'^mcptasks_tasks_get_total\{path="(\w+)"\} (\S+)$', text, re.M)
    return {path: float(count) for path, count in found}


def verify_audit(stack: Stack) -> subprocess.CompletedProcess[str]:
    """``manage.py verify_audit`` as a process of the stack (through PgBouncer)."""
    return subprocess.run(
        [str(BIN / "python"), "manage.py", "verify_audit"],
        cwd=REPO,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_tasks_are_created_polled_completed_and_cancelled_through_pgbouncer(bounced, cast):
    token = cast["alice"]["token"]
    web = bounced.web_urls["web"]
    done = [create(web, token, "echo_task", {"text": f"n{n}"}) for n in range(8)]
    long = [
        create(web, token, "run_pipeline", {"pipeline": f"p{n}", "stages": 30, "stage_seconds": 1})
        for n in range(2)
    ]
    for task_id in long:
        reply = post(web, token, "tasks/cancel", {"taskId": task_id}, name=task_id)
        assert "result" in reply, reply
    states = wait_terminal(web, token, done + long, timeout=90)
    assert states == {**dict.fromkeys(done, "completed"), **dict.fromkeys(long, "cancelled")}, (
        states,
        bounced.log("worker1")[-3000:],
    )
    assert set(Task.objects.filter(pk__in=done + long).values_list("state", flat=True)) <= set(
        TERMINAL
    )
    for task_id in done:
        actions = list(
            AuditEvent.objects.filter(task_id=task_id)
            .order_by("seq")
            .values_list("action", flat=True)
        )
        assert actions[0] == "task.created" and actions[-1] == "task.completed", actions
    # The workers ran them, not the web process (which runs no worker when REDIS_URL is set).
    runners = set(
        AuditEvent.objects.filter(task_id__in=done, action="task.started").values_list(
            "actor_display", flat=True
        )
    )
    assert runners and str(bounced.processes["web"].pid) not in {r.split(":")[1] for r in runners}
    verified = verify_audit(bounced)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "ok " in verified.stdout


def test_the_fast_tasks_get_path_answers_through_pgbouncer_in_utc(bounced, cast):
    token = cast["alice"]["token"]
    web = bounced.web_urls["web"]
    task_id = create(web, token, "echo_task", {"text": "fast"})
    assert wait_terminal(web, token, [task_id], timeout=60) == {task_id: "completed"}
    before = answered(web)
    replies = [post(web, token, "tasks/get", {"taskId": task_id}, name=task_id) for _ in range(6)]
    after = answered(web)
    assert after.get("fast", 0) - before.get("fast", 0) == 6, (after, before)
    assert after.get("general", 0) == before.get("general", 0)
    task = Task.objects.get(pk=task_id)
    for reply in replies:
        result = reply["result"]
        assert result["status"] == "completed"
        # Server connections start in Asia/Kolkata; the answer is UTC like the ORM's.
        assert result["createdAt"].startswith(task.created_at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert "fast tasks/get unavailable" not in bounced.log("web")


@contextmanager
def web_process(bounced: Stack, name: str, **env: str | None) -> Iterator[tuple[Stack, str]]:
    """One more web process through the same PgBouncer, its environment changed by ``env``
    (None removes a variable), with a metrics directory of its own."""
    changed = {**bounced.env, "PROMETHEUS_MULTIPROC_DIR": str(bounced.workdir / f"metrics-{name}")}
    for key, value in env.items():
        if value is None:
            changed.pop(key, None)
        else:
            changed[key] = value
    Path(changed["PROMETHEUS_MULTIPROC_DIR"]).mkdir()
    stack = Stack(env=changed, workdir=bounced.workdir)
    try:
        yield stack, stack.web(name)
    finally:
        stack.stop()


def completed_task(web: str, token: str) -> str:
    task_id = create(web, token, "echo_task", {"text": "done"})
    wait_for(lambda: Task.objects.get(pk=task_id).state == TaskState.COMPLETED, 60, "completion")
    return task_id


def both_server_connections_open(url: str) -> None:
    """Two transactions at once through PgBouncer: both its server connections are open (and
    idle after), so its round robin hands consecutive transactions to different ones."""
    with psycopg.connect(url) as first, psycopg.connect(url) as second:
        first.execute("SELECT 1")
        second.execute("SELECT 1")


def test_prepared_statements_break_the_fast_path_through_pgbouncer_1_18(bounced, cast):
    """MCPTASKS_FAST_TASKS_GET_PREPARE=true behind PgBouncer 1.18: a statement prepared on one
    server connection is missing (or already taken) on the next, so polls fail over to the
    general path — why the setting turns preparing off by default."""
    token = cast["alice"]["token"]
    with web_process(bounced, "web-prepare", MCPTASKS_FAST_TASKS_GET_PREPARE="true") as (
        stack,
        web,
    ):
        task_id = completed_task(web, token)
        both_server_connections_open(stack.env["DATABASE_URL"])
        before = answered(web)
        # Which server connection each poll lands on also depends on the worker's and beat's
        # transactions through the same two: poll until one lands where the statement is not
        # (a handful of polls; a hundred without one would mean preparing works here).
        replies, after = [], before
        while len(replies) < 100 and after.get("general", 0) == before.get("general", 0):
            replies += [post(web, token, "tasks/get", {"taskId": task_id}, name=task_id)]
            after = answered(web)
        assert all(reply["result"]["status"] == "completed" for reply in replies)
        assert after.get("general", 0) > before.get("general", 0), (after, before, len(replies))
        assert re.search(
            r"prepared statement \S+ (does not exist|already exists)", stack.log("web-prepare")
        )


def test_without_the_setting_the_fast_path_cannot_connect_through_pgbouncer(bounced, cast):
    """The same PgBouncer, a web process without MCPTASKS_DB_POOLER: the ORM works (Django
    prepares nothing), but the fast path's pool asks for TimeZone=UTC in the options startup
    parameter, which PgBouncer refuses — each poll waits out its pool, then the general path
    answers."""
    token = cast["alice"]["token"]
    with web_process(bounced, "web-without-setting", MCPTASKS_DB_POOLER=None) as (stack, web):
        task_id = completed_task(web, token)
        before = answered(web)
        started = time.monotonic()
        reply = post(web, token, "tasks/get", {"taskId": task_id}, name=task_id)
        elapsed = time.monotonic() - started
        after = answered(web)
        assert reply["result"]["status"] == "completed"
        assert after.get("fast", 0) == before.get("fast", 0) == 0
        assert after.get("general", 0) > before.get("general", 0)
        log = stack.log("web-without-setting")
        assert "unsupported startup parameter: options" in log
        assert "fast tasks/get unavailable" in log
        assert elapsed > 5, elapsed  # the fast pool's 10 s timeout, then the general path
