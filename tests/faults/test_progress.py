"""Progress that is current (issue 22): the status-message throttle coalesces, so what
``tasks/get`` reads is never more than one throttle interval behind the tool's latest report,
across a Celery worker process, durable sleeps and the replay that follows them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mcptasks.progress import REPORT_INTERVAL_S
from tests.faults import harness
from tests.protocol import conftest as protocol_fixtures

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

mcp_for = protocol_fixtures.mcp_for

# Reports closer together than the interval, then work with no ctx call longer than it: a
# throttle that drops reports shows "stage 1/8" through stage 2 and "stage 5/8" through stage 6.
# The durable sleep after stage 4 makes stages 1-4 replay (and work again) in the next run.
DURATIONS = [0.1, 1.8, 0.1, 0.1, 0.1, 1.8, 0.2, 0.3]
SLEEP_AFTER = [4]
# Between a write and the poll that reads it: the HTTP round trip and a database write.
TOLERANCE_S = 0.3


def test_status_message_seen_by_tasks_get_is_never_older_than_one_interval(
    cluster: harness.Cluster, mcp_for: Any, settings: Any
) -> None:
    settings.MCPTASKS_POLL_BURST = 100_000  # this test polls every 50 ms on purpose
    cluster.start_worker("A")
    client = mcp_for("alice")
    reply = client.tool("report_stages", {"durations": DURATIONS, "sleep_after": SLEEP_AFTER})
    assert reply.status == 200, reply.body
    task_id = reply.result["taskId"]

    seen: list[tuple[float, str, str]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        asked = time.time()
        got = client.call("tasks/get", {"taskId": task_id})
        assert got.status == 200, got.body
        seen.append((asked, got.result["status"], got.result.get("statusMessage", "")))
        if got.result["status"] in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.05)
    assert seen[-1][1] == "completed", got.result
    reported = got.result["result"]["structuredContent"]["reported"]
    assert len(reported) == len(DURATIONS)

    stale = []
    stages_seen = set()
    for asked, status, message in seen:
        if status == "completed" or not message.startswith("stage "):
            continue
        number = int(message.split()[1].split("/")[0])
        stages_seen.add(number)
        if number < len(reported):
            # How long the seen message had been superseded by the next report when read.
            behind = asked - reported[number]
            if behind > REPORT_INTERVAL_S + TOLERANCE_S:
                stale.append((round(behind, 2), message, status))
    assert not stale, f"status messages older than one interval were read: {stale}"
    # The polls saw the run move (not one message throughout), including the long stages.
    assert {2, 6} <= stages_seen, sorted(stages_seen)
