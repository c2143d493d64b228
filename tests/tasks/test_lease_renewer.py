"""The worker's lease renewer thread (runner._LeaseRenewer): woken only for an attempt due
sooner than its wait ends (issue 23: a no-op task's attempt ends before its first renewal), and
still renewing every lease and stopping every overrun in time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcptasks import runner


@pytest.fixture
def renewer(monkeypatch, settings) -> Iterator[Any]:
    settings.MCPTASKS_LEASE_RENEW_S = 0.5  # the shortest interval the renewer uses
    seen: list[tuple[str, str, float]] = []
    overran = threading.Event()

    def renew(*, task_id: str, attempt: int) -> None:
        seen.append(("renewed", task_id, time.monotonic()))

    def stop(task_id: str, attempt: int, running: Any) -> None:
        seen.append(("stopped", task_id, time.monotonic()))
        overran.set()

    monkeypatch.setattr(runner.lifecycle, "task_renew_lease", renew)
    monkeypatch.setattr(runner, "_stop_overrun", stop)
    instance: Any = runner._LeaseRenewer()
    notified: list[int] = []
    notify = instance.changed.notify

    def counted() -> None:
        notified.append(1)
        notify()

    monkeypatch.setattr(instance.changed, "notify", counted)
    instance.seen, instance.overran, instance.notified = seen, overran, notified
    yield instance
    # Its thread outlives the test: left with attempts, it would renew them with the real
    # task_renew_lease every 0.5 s (and log a failure each time) for the rest of the run.
    with instance.changed:
        instance.due.clear()


def _waiting(instance: Any) -> None:
    for _ in range(200):
        with instance.changed:
            if 0 < instance.wakes_at < float("inf"):
                return
        time.sleep(0.01)
    raise AssertionError("the renewer thread never waited for a renewal")


def test_an_attempt_due_no_sooner_does_not_wake_the_renewer(renewer):
    renewer.add("a", 1)
    _waiting(renewer)
    assert len(renewer.notified) == 1  # the first attempt: the thread waited for one
    renewer.add("b", 1)
    renewer.discard("b", 1)
    renewer.add("c", 1)
    assert len(renewer.notified) == 1
    deadline = time.monotonic() + 3
    while {"a", "c"} - {task for kind, task, _ in renewer.seen if kind == "renewed"}:
        assert time.monotonic() < deadline, renewer.seen
        time.sleep(0.05)
    assert "b" not in {task for _, task, _ in renewer.seen}  # discarded before it was due


def test_an_attempt_that_overruns_sooner_wakes_the_renewer(renewer):
    renewer.add("a", 1)
    _waiting(renewer)
    added = time.monotonic()
    renewer.add("short", 1, limit_s=0.05)
    assert len(renewer.notified) == 2
    assert renewer.overran.wait(2)
    ((_, task, at),) = [entry for entry in renewer.seen if entry[0] == "stopped"]
    assert task == "short" and at - added < 0.4  # before "a"'s renewal, 0.5 s after it began
