"""Process plumbing and invariant checks shared by the fault tests and scripts/fault_kill_loop.py.

Real Celery worker and beat processes run against the test database and a Redis database the
test owns; a private redis-server runs on a free port for the outage test. Every process is
started here and ended here, by pid, and only processes this module started (or their pool
children, found through /proc) are ever signalled.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LEASE_S = 3
SWEEP_S = 0.5
# The bound: a task whose worker died ends terminal within lease + sweep + 10 s.
SETTLE_S = LEASE_S + SWEEP_S + 10
RECONCILE_MARGIN_S = 1
WORKER_APP_PREFIX = "fault-worker-"
STALE_WARNING = "fenced off a write from a stale attempt"
TOOL = "fault_steps"


# ---------------------------------------------------------------- waiting
def wait_for[T](predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy; return it or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------- processes
def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (the prefork pool processes of a Celery worker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name sits in parentheses and may contain spaces: split after it.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


@dataclass
class Proc:
    """One process this harness started (a Celery worker or beat, or a redis-server)."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    pool: str = ""  # a worker's Celery pool: "prefork" (a main process and its children), "solo"

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def children(self) -> list[int]:
        return _children(self.pid) if self.alive() else []

    def owns(self, pid: int) -> bool:
        return pid == self.pid or pid in self.children()

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to the pool children, then to the process itself (by pid)."""
        for pid in [*self.children(), self.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, pattern: str, timeout: float = 90.0) -> None:
        def seen() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return re.search(pattern, self.log()) is not None

        wait_for(seen, timeout, f"{self.name} to log {pattern!r}", interval=0.1)

    def stop(self) -> None:
        """Kill the process and its children (SIGCONT first, in case a test stopped them)."""
        if self.alive():
            children = self.children()
            for pid in [*children, self.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            for pid in [*children, self.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)


def flush_redis(url: str) -> None:
    redis_client(url).flushdb()


def redis_db_url(base_url: str, db: int) -> str:
    parsed = urlparse(base_url)
    return f"{parsed.scheme}://{parsed.netloc}/{db}"


class PrivateRedis:
    """A redis-server of the test's own on a free port, without persistence."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: Proc | None = None
        self.incarnation = 0

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.incarnation += 1
        log_path = self.workdir / f"redis-{self.incarnation}.log"
        command = [
            _redis_server(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.workdir),
        ]
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.proc = Proc(f"redis-{self.incarnation}", popen, log_path)
        wait_for(self.ping, 20, f"the private redis on port {self.port}")

    def ping(self) -> bool:
        try:
            return bool(redis_client(self.url()).ping())
        except Exception:
            return False

    def stop(self) -> None:
        """Crash it (SIGKILL): with no persistence every queued message is lost."""
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


def _redis_server() -> str:
    for candidate in ("/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if Path(candidate).exists():
            return candidate
    return "redis-server"


@dataclass
class Cluster:
    """Celery workers and beat of one test, all pointed at the same database and broker."""

    database_url: str
    broker_url: str
    channel_url: str
    workdir: Path
    tool_packs: list[str]
    lease_s: int = LEASE_S
    sweep_s: float = SWEEP_S
    extra_env: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    tag: str = field(default_factory=lambda: str(os.getpid()))

    def env(self, app_name: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CELERY_", "PYTEST", "MCPTASKS_REQUIRE"))
        }
        env.update(
            {
                "DATABASE_URL": self.database_url,
                "DATABASE_POOL_MAX": "4",
                "REDIS_URL": self.broker_url,
                "CHANNEL_REDIS_URL": self.channel_url,
                "SECRET_KEY": os.environ.get("SECRET_KEY") or "fault-tests-secret-key",
                "MCPTASKS_REQUEST_STATE_KEY": os.environ.get("MCPTASKS_REQUEST_STATE_KEY") or "x",
                "MCPTASKS_AUDIT_SIGNING_KEY": os.environ.get("MCPTASKS_AUDIT_SIGNING_KEY") or "x",
                "MCPTASKS_LEASE_S": str(self.lease_s),
                "MCPTASKS_SWEEP_INTERVAL_S": str(self.sweep_s),
                "MCPTASKS_TOOL_PACKS": ",".join(self.tool_packs),
                "MCPTASKS_VAR_DIR": str(self.workdir / "var"),
                "PGAPPNAME": app_name,
                "PYTHONPATH": str(REPO),
                "PYTHONUNBUFFERED": "1",
                "LOG_LEVEL": "INFO",
                # The fault tests drive many tasks of one principal through few slots; the caps
                # are tested through a tenant's own field (tests/faults/test_fair_share.py).
                "MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT": "0",
                "MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL": "0",
                **self.extra_env,
            }
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> Proc:
        number = sum(1 for p in self.procs if p.name.split("#")[0] == name) + 1
        log_path = self.workdir / f"{name}-{number}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                [str(BIN / "celery"), "-A", "mcptasks", *args],
                cwd=REPO,
                env=self.env(f"{WORKER_APP_PREFIX}{name}"),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        proc = Proc(f"{name}#{number}", popen, log_path)
        self.procs.append(proc)
        return proc

    def start_worker(
        self, name: str, *, pool: str = "prefork", concurrency: int = 1, wait: bool = True
    ) -> Proc:
        proc = self._spawn(
            name,
            [
                "worker",
                f"--pool={pool}",
                "-c",
                str(concurrency),
                f"--hostname={name}-{self.tag}@fault",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "INFO",
            ],
        )
        proc.pool = pool
        if wait:
            proc.wait_log(r" ready\.")
        return proc

    def start_workers(self, *names: str, pool: str = "prefork") -> list[Proc]:
        """Start several workers at once (each takes seconds to boot); wait for all."""
        procs = [self.start_worker(name, pool=pool, wait=False) for name in names]
        for proc in procs:
            proc.wait_log(r" ready\.")
        return procs

    def start_beat(self) -> Proc:
        proc = self._spawn(
            "beat",
            [
                "beat",
                "-s",
                str(self.workdir / "beat-schedule"),
                "--pidfile",
                str(self.workdir / "beat.pid"),
                "-l",
                "INFO",
            ],
        )
        proc.wait_log(r"beat: Starting")
        return proc

    def worker_of(self, pid: int) -> Proc | None:
        """The live worker whose process (or pool child) ``pid`` is."""
        for proc in self.procs:
            if proc.alive() and not proc.name.startswith("beat") and proc.owns(pid):
                return proc
        return None

    def stale_warnings(self) -> Counter[str]:
        return Counter({p.name: p.log().count(STALE_WARNING) for p in self.procs})

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()


@contextlib.contextmanager
def producer_broker(url: str) -> Iterator[None]:
    """Point this process's Celery producer (events.dispatch_job) at ``url`` for a while."""
    from mcptasks.celery import app

    def reset() -> None:
        # Drop the references only: kombu keeps its pools per broker URL in a global registry,
        # and closing one here would break the next test that uses the same URL.
        app._pool = None
        with contextlib.suppress(AttributeError, KeyError):
            app.__dict__["amqp"]._producer_pool = None

    previous = app.conf.broker_url
    app.conf.broker_url = url
    reset()
    try:
        yield
    finally:
        app.conf.broker_url = previous
        reset()


def database_url(settings_dict: dict[str, Any]) -> str:
    user = settings_dict.get("USER") or "postgres"
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else f"{user}@"
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


# ---------------------------------------------------------------- tasks
class FaultTasks:
    """Creates ``fault_steps`` tasks (or ``tool``'s) through lifecycle, as the MCP endpoint
    would."""

    def __init__(self, cast: dict[str, dict[str, Any]], tool: str = TOOL) -> None:
        from mcptasks.tools.registry import registry

        self.cast = cast
        tool_def = registry.get(tool)
        assert tool_def is not None, f"{tool} is not loaded (tests.toolpack in the tool packs?)"
        self.tool_def = tool_def

    def create(self, owner: str = "alice", **arguments: Any) -> str:
        from audit.record import Actor
        from mcptasks import lifecycle

        entry = self.cast[owner]
        task, _ = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=entry["tenant"].pk,
                principal_id=entry["user"].pk,
                tool_name=self.tool_def.name,
                arguments=arguments,
                policy_revision=self.tool_def.policy_revision,
                ttl_ms=self.tool_def.ttl_ms,
                client_capabilities={"extensions": {"io.modelcontextprotocol/tasks": {}}},
            ),
            actor=Actor.for_user(entry["user"], kind="principal"),
        )
        return task.pk
