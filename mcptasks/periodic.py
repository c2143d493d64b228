"""Work a periodic sweep asks for often but that needs doing only now and then (creating
partitions ahead, trying to drop a day): :class:`AtMostEvery` runs it at most once a period in
this process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class AtMostEvery:
    """Runs a function at most every ``every_s`` seconds in this process, from any thread."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._began = float("-inf")
        self._lock = threading.Lock()

    def run(self, work: Callable[[], list[T]]) -> list[T]:
        """``work()`` if its last run began ``every_s`` or more ago, else ``[]`` (also while
        another thread runs it). A run that raises counts as a run: a failing database is not
        asked again at every sweep, and the sweep's other work goes on meanwhile."""
        with self._lock:
            if self._clock() - self._began < self.every_s:
                return []
            self._began = self._clock()
        return work()

    def reset(self) -> None:
        """The next :meth:`run` runs (for tests, and after something made the work due)."""
        with self._lock:
            self._began = float("-inf")
