"""Status messages of a running attempt, coalesced (DESIGN §4).

``ctx.report`` writes at most once per :data:`REPORT_INTERVAL_S`; a report that comes sooner is
kept as the *pending* message, never dropped: a trailing write puts the latest one on the task
row when the interval is up (one daemon thread per process does it while the tool is busy), and a
durable sleep writes it with the suspension. So whatever ``tasks/get``, the streams and the
dashboard read is never more than one interval behind the tool's latest report.

Reports made while an attempt replays steps already recorded are not new progress and are not
written (the row already shows the latest of them, or a later one): a resumed task's message
never steps back to "stage 1".
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time

from django.db import close_old_connections

from mcptasks import lifecycle

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 1.0


class Progress:
    """The status messages of one attempt of one task."""

    def __init__(self, task_id: str, attempt: int, interval: float = REPORT_INTERVAL_S) -> None:
        self.task_id, self.attempt, self.interval = task_id, attempt, interval
        self.lock = threading.Lock()
        self.pending: str | None = None
        self.last_write = float("-inf")
        self.closed = False

    def report(self, message: str, *, replaying: bool = False) -> None:
        if replaying:
            return
        with self.lock:
            now = time.monotonic()
            if now - self.last_write >= self.interval:
                self.pending = None
                self._write(message, now)
                return
            self.pending = message
            due = self.last_write + self.interval
        _flusher.schedule(due, self)

    def take_pending(self) -> str:
        """The message not yet written ("" if none), for a suspension to write itself."""
        with self.lock:
            message, self.pending = self.pending or "", None
            return message

    def flush(self) -> None:
        """Write the pending message (the flusher's call, once it is due)."""
        with self.lock:
            if self.closed or self.pending is None:
                return
            now = time.monotonic()
            due = self.last_write + self.interval
            if now < due:  # written since this flush was scheduled: keep the pace
                pass
            else:
                message, self.pending = self.pending, None
                self._write(message, now)
                return
        _flusher.schedule(due, self)

    def close(self) -> None:
        """The attempt ended: nothing pending is written after this."""
        with self.lock:
            self.closed, self.pending = True, None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, message: str, now: float) -> None:
        self.last_write = now
        lifecycle.task_report(task_id=self.task_id, attempt=self.attempt, message=message)


class _Flusher:
    """One daemon thread per process that writes the pending messages once they are due."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.changed = threading.Condition()
        self.heap: list[tuple[float, int, Progress]] = []
        self.order = itertools.count()
        self.thread: threading.Thread | None = None

    def schedule(self, due: float, progress: Progress) -> None:
        with self.changed:
            heapq.heappush(self.heap, (due, next(self.order), progress))
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._loop, daemon=True, name="mcptasks-progress"
                )
                self.thread.start()
            self.changed.notify()

    def _next(self) -> Progress:
        with self.changed:
            while True:
                now = time.monotonic()
                if self.heap and self.heap[0][0] <= now:
                    return heapq.heappop(self.heap)[2]
                self.changed.wait(self.heap[0][0] - now if self.heap else None)

    def _loop(self) -> None:
        while True:
            progress = self._next()
            try:
                progress.flush()
            except lifecycle.LifecycleError:
                pass  # the attempt no longer holds the task: its message does not matter
            except Exception:
                log.warning("status message write failed", exc_info=True)
            close_old_connections()


_flusher = _Flusher()
