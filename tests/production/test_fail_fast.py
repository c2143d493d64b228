"""Fail fast: ``serve`` and the Celery worker refuse to start on a tool pack that does not
import, or whose tool declares limits its own TTL cannot hold — real processes, each ended by
pid. Neither says "Serving" nor takes a job first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.production.processes import BIN, free_port

REPO = Path(__file__).resolve().parents[2]
PACKS = {
    "tests.packs.broken_import": "ModuleNotFoundError: No module named "
    "'mcptasks_missing_dependency'",
    "tests.packs.contradicting_limits": "outlived_by_its_limits: ttl_ms=60000 must exceed "
    "max_input_wait_s + max_run_s (300 s)",
}


def run(argv: list[str], pack: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Start the process on ``pack``; it must stop by itself (killed by pid if it does not)."""
    environment = {**os.environ, "MCPTASKS_TOOL_PACKS": f"mcptasks.tools.demo,{pack}", **env}
    process = subprocess.Popen(
        argv,
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{argv[1:3]} kept running on a broken pack:\n{out}\n{err}")
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


@pytest.mark.live
@pytest.mark.parametrize("pack", sorted(PACKS))
def test_serve_stops_at_start_up_on_a_broken_tool_pack(pack, tmp_path):
    argv = [sys.executable, "manage.py", "serve", "--port", str(free_port())]
    result = run(argv, pack, MCPTASKS_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert f"tool pack {pack!r} failed to load" in result.stderr
    assert PACKS[pack] in result.stderr
    assert "Serving" not in result.stdout and "worker" not in result.stdout


@pytest.mark.live
@pytest.mark.redis
@pytest.mark.parametrize("pack", sorted(PACKS))
def test_the_celery_worker_stops_at_start_up_on_a_broken_tool_pack(pack, tmp_path):
    argv = [str(BIN / "celery"), "-A", "mcptasks", "worker", "--pool=solo", "-l", "warning"]
    result = run(argv, pack, MCPTASKS_VAR_DIR=str(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"tool pack {pack!r} failed to load" in output
    assert PACKS[pack] in output
    assert "ready." not in output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl_ms": 60_000, "max_run_s": 300}, r"must exceed max_input_wait_s \+ max_run_s"),
        ({"ttl_ms": 60_000, "poll_interval_ms": 60_000}, "poll_interval_ms=60000 must be below"),
        ({"max_input_wait_s": 0}, "max_input_wait_s=0 must be positive"),
        ({"max_run_s": -5}, "max_run_s=-5 must be positive"),
        ({"ttl_ms": 0}, "ttl_ms=0 must be positive"),
    ],
)
def test_a_tool_whose_declaration_contradicts_its_limits_is_refused(options, message):
    from mcptasks.tools.registry import Registry, ToolDef, ToolRegistrationError

    def fn(ctx: object) -> str:
        return "never"

    tool_def = ToolDef(
        name="contradiction", fn=fn, description="", input_schema={"type": "object"}, **options
    )
    with pytest.raises(ToolRegistrationError, match=message):
        Registry().register(tool_def)
