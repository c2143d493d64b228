"""Stopping Python code that will not stop by itself: raise an exception in a thread at its next
Python instruction (the worker's watchdog at a tool's maximum run time, the time limit of the
questions a task tool asks before its task exists). A call blocked in C is interrupted only once
it returns to Python."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def async_raise(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in the thread ``thread_id`` (None: withdraw one not delivered yet)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


@contextmanager
def time_limit(seconds: float, exc: type[BaseException]) -> Iterator[None]:
    """Raise ``exc`` in this thread if the block still runs after ``seconds``."""
    thread_id = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "raised": False}

    def expire() -> None:
        with lock:
            if not state["done"]:
                state["raised"] = True
                async_raise(thread_id, exc)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["raised"]:
                async_raise(thread_id, None)  # raised but not delivered yet: withdraw it
