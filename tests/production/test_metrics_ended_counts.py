"""/metrics counts the ended tasks (most of the task table) at most every
MCPTASKS_METRICS_ENDED_COUNT_S per process, and the active states at every scrape."""

from __future__ import annotations

import re

import pytest

from mcptasks import metrics, runner

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def counted_afresh(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: now[0])
    metrics.ENDED_COUNTS.clear()
    yield now
    metrics.ENDED_COUNTS.clear()


def gauge(client, state: str) -> float:
    body = client.get("/metrics").content.decode()
    found = re.search(rf'^mcptasks_tasks{{state="{state}"}} (\S+)$', body, re.M)
    assert found, f"no mcptasks_tasks gauge for {state}"
    return float(found.group(1))


def test_ended_counts_are_read_at_most_every_setting_seconds(
    client, make_task, settings, counted_afresh
):
    settings.MCPTASKS_METRICS_ENDED_COUNT_S = 300
    runner.run_task(make_task(tool_name="echo_task").pk)
    assert gauge(client, "completed") == 1
    runner.run_task(make_task(tool_name="echo_task").pk)
    counted_afresh[0] += 299
    assert gauge(client, "completed") == 1  # read 299 s ago: kept
    counted_afresh[0] += 1
    assert gauge(client, "completed") == 2  # 300 s: read again


def test_active_states_are_counted_at_every_scrape(client, make_task, settings):
    settings.MCPTASKS_METRICS_ENDED_COUNT_S = 300
    assert gauge(client, "queued") == 0
    task = make_task(tool_name="echo_task")
    assert gauge(client, "queued") == 1
    runner.run_task(task.pk)
    assert gauge(client, "queued") == 0


def test_zero_counts_the_ended_tasks_at_every_scrape(client, make_task, settings):
    settings.MCPTASKS_METRICS_ENDED_COUNT_S = 0
    assert gauge(client, "completed") == 0
    runner.run_task(make_task(tool_name="echo_task").pk)
    assert gauge(client, "completed") == 1
