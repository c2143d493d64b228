"""mcptasks.periodic.AtMostEvery: the sweep's work that needs doing only now and then."""

from __future__ import annotations

import threading

import pytest

from mcptasks.periodic import AtMostEvery


def test_work_runs_once_a_period_and_not_again_within_it() -> None:
    runs: list[int] = []
    now = [1000.0]
    every = AtMostEvery(60.0, clock=lambda: now[0])
    assert every.run(lambda: runs.append(1) or ["made"]) == ["made"]
    now[0] += 59
    assert every.run(lambda: runs.append(2) or ["made"]) == []
    now[0] += 1
    assert every.run(lambda: runs.append(3) or ["made"]) == ["made"]
    assert runs == [1, 3]


def test_a_run_that_raises_counts_as_a_run() -> None:
    every = AtMostEvery(3600.0)

    def broken() -> list[str]:
        raise RuntimeError("database away")

    with pytest.raises(RuntimeError):
        every.run(broken)
    assert every.run(lambda: ["made"]) == []  # not asked again at every sweep
    every.reset()
    assert every.run(lambda: ["made"]) == ["made"]


def test_reset_makes_the_next_run_due() -> None:
    every = AtMostEvery(3600.0)
    assert every.run(lambda: ["made"]) == ["made"]
    every.reset()
    assert every.run(lambda: ["again"]) == ["again"]


def test_a_second_thread_skips_while_the_first_runs() -> None:
    every = AtMostEvery(3600.0)
    inside, release = threading.Event(), threading.Event()
    results: list[list[str]] = []

    def slow() -> list[str]:
        inside.set()
        release.wait(5)
        return ["first"]

    first = threading.Thread(target=lambda: results.append(every.run(slow)))
    first.start()
    assert inside.wait(5)
    assert every.run(lambda: ["second"]) == []
    release.set()
    first.join(5)
    assert results == [["first"]]
