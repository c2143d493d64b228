"""The README's requests, run as written against a fresh demo (the embedded default served by
``manage.py serve``): the shell block that calls every MCP method the server serves, the REST
token from the command line, and the administration commands. The README cannot drift from what
the server answers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.live.embedded_demo import ROOT, embedded_env, executable, running

pytestmark = pytest.mark.live
README = (ROOT / "README.md").read_text()
MCP_METHODS = [
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
]


def block_after(heading: str, language: str) -> str:
    """The first ```language block after ``heading`` in the README."""
    section = README[README.index(heading) :]
    match = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert match, f"no {language} block after {heading!r}"
    return match.group(1)


def bash(script: str, env: dict[str, str], timeout: float = 120) -> str:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_readme_shows_every_mcp_method_the_server_serves() -> None:
    from mcptasks.mcp.handlers import LISTEN, METHODS

    script = block_after("### Every MCP method, from the shell", "bash")
    served = {*METHODS, LISTEN}
    assert set(MCP_METHODS) == served, "this list and the server's methods differ"
    for method in MCP_METHODS:
        assert re.search(rf"\bmcp {re.escape(method)} ", script), method


def test_the_readme_mcp_block_runs_every_flow(embedded_demo: tuple[Path, dict[str, str]]) -> None:
    assert shutil.which("curl") and shutil.which("jq"), "the README's block needs curl and jq"
    var_dir, tokens = embedded_demo
    script = block_after("### Every MCP method, from the shell", "bash")
    with running("serve", var_dir) as server:
        env = {**os.environ, "TOKEN": tokens["alice"], "MCP": f"{server.url}/mcp"}
        output = bash(script, env)
    assert '"error"' not in output, output
    assert '"supportedVersions":["2026-07-28"]' in output  # server/discover
    assert '"name":"draft_release_notes"' in output  # tools/list
    assert '"status":"input_required"' in output and '"notes":{"method":"elicitation/create"' in (
        output
    )  # tasks/get, then tasks/update
    assert '"structuredContent":{"service":"billing","summary":"Faster invoices"' in output
    assert "notifications/subscriptions/acknowledged" in output  # subscriptions/listen
    assert '"status":"cancelled"' in output  # tasks/cancel, seen on the stream
    assert output.rstrip().endswith(
        '"result":{"resultType":"complete","_meta":{'
        + ('"io.modelcontextprotocol/subscriptionId":1}}}')
    )


def test_the_readme_rest_token_and_administration_commands_work(
    embedded_demo: tuple[Path, dict[str, str]],
) -> None:
    var_dir, _ = embedded_demo
    env = embedded_env(var_dir)
    rest = block_after("## REST API", "sh")
    token_line = next(line for line in rest.splitlines() if "issue_token" in line)
    admin = block_after("## Administration", "sh")
    # changepassword prompts for the password: the only interactive line.
    commands = [line for line in admin.splitlines() if line and "changepassword" not in line]
    assert len(commands) == 3
    bash("\n".join(commands), env)
    with running("serve", var_dir) as server:
        token = bash(f'{token_line}\nprintf %s "$TOKEN"', env)
        response = httpx.get(
            f"{server.url}/api/v1/tasks", headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200, response.text
        assert {task["principal"] for task in response.json()["results"]} == {"alice"}
        dora = bash(f"{commands[-1]} --quiet", env).strip()
        whoami = httpx.get(
            f"{server.url}/api/v1/tokens", headers={"Authorization": f"Bearer {dora}"}
        )
        assert whoami.status_code == 200, whoami.text


def test_a_command_with_an_unknown_tenant_exits_1_naming_it(
    embedded_demo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    var_dir, _ = embedded_demo
    out = tmp_path / "audit.jsonl"
    result = subprocess.run(
        [
            executable("python"),
            "manage.py",
            "export_audit",
            "--tenant",
            "acmee",
            "--format",
            "jsonl",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=embedded_env(var_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "no tenant 'acmee'" in result.stderr
    assert not out.exists()
