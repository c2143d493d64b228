from __future__ import annotations

import pytest

from tests.protocol.conftest import validate, validate_tools_call_result

pytestmark = pytest.mark.django_db(transaction=True)


def test_discover_and_list(mcp):
    reply = mcp.call("server/discover")
    assert reply.status == 200, reply.body
    validate("DiscoverResult", reply.result)
    reply = mcp.call("tools/list")
    validate("ListToolsResult", reply.result)
    assert [t["name"] for t in reply.result["tools"]] == sorted(
        t["name"] for t in reply.result["tools"]
    )


def test_task_roundtrip(mcp, run_jobs):
    reply = mcp.tool("echo_task", {"text": "yo"})
    validate_tools_call_result(reply.result)
    task_id = reply.result["taskId"]
    run_jobs()
    got = mcp.call("tasks/get", {"taskId": task_id})
    validate("GetTaskResult", got.result, ext=True)
    assert got.result["status"] == "completed"
