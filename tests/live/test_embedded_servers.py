"""No silent no-op: on the embedded default, whichever server runs the application also runs
the in-process worker, so the tasks it creates run (uvicorn, as the README suggests for many
streams; daphne directly; ``manage.py serve``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live.embedded_demo import running

pytestmark = pytest.mark.live
VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}


def call(url: str, token: str, method: str, params: dict[str, Any], name: str = "") -> Any:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if name:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    response = httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["result"]


@pytest.mark.parametrize("kind", ["uvicorn", "daphne", "serve"])
def test_a_task_created_through_any_server_runs_to_completion(
    embedded_demo: tuple[Path, dict[str, str]], kind: str
) -> None:
    var_dir, tokens = embedded_demo
    with running(kind, var_dir) as server:
        created = call(
            server.url,
            tokens["alice"],
            "tools/call",
            {
                "name": "run_pipeline",
                "arguments": {"pipeline": kind, "stages": 1, "stage_seconds": 0.1},
            },
            name="run_pipeline",
        )
        task_id = created["taskId"]
        deadline = time.monotonic() + 30
        status = created["status"]
        while status != "completed" and time.monotonic() < deadline:
            time.sleep(0.3)
            status = call(server.url, tokens["alice"], "tasks/get", {"taskId": task_id}, task_id)[
                "status"
            ]
        assert status == "completed", f"{kind}: task still {status}\n{server.log_tail()}"
        if kind != "serve":
            assert "runs the in-process worker" in server.log.read_text()
