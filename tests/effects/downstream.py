"""The fake downstream of the effect tests: the demo pack's fake cloud, plus marks.

:class:`MarkedCloud` is :class:`mcptasks.tools.fakes.FakeCloud` (one JSON file at
``MCPTASKS_FAKE_CLOUD``, shared by every process, locked per call; it honours idempotency keys:
a repeated key returns the first result and applies nothing; a fencing token lower than one
seen for the key is refused). Its ``charge`` call writes a mark
just before the downstream call ("about to call") and just after it ("called", saying whether
this call applied the key or got the first result back), and can hold there the first time it
reaches a mark, so a test can SIGKILL the process at exactly that point.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from typing import Any

from mcptasks.tools.fakes import FakeCloud

BEFORE = "about to call"
AFTER = "called"
# A tool argument ``hold`` names the point; the mark there is what the test watches for.
HOLD_MARKS = {"before": BEFORE, "after": AFTER}
KIND = "charge"


class MarkedCloud(FakeCloud):
    def mark(self, key: str, mark: str, **data: Any) -> int:
        """Record that this process reached ``mark`` for ``key``; return how many times that
        mark had been reached for that key before."""
        with self._state() as state:
            marks = state.setdefault("marks", [])
            seen = sum(1 for m in marks if m["key"] == key and m["mark"] == mark)
            marks.append({"key": key, "mark": mark, "pid": os.getpid(), "at": time.time(), **data})
        return seen

    def charge(self, key: str, *, hold: str = "", hold_s: float = 60.0) -> dict[str, Any]:
        """Apply ``key`` once (the fake honours keys); hold at ``hold`` the first time."""
        if self.mark(key, BEFORE) == 0 and hold == "before":
            time.sleep(hold_s)
        fresh = {"charge_id": uuid.uuid4().hex, "pid": os.getpid()}
        result = self._apply(KIND, key, fresh, self._fence(key))
        if self.mark(key, AFTER, applied=result == fresh) == 0 and hold == "after":
            time.sleep(hold_s)
        return result

    # ------------------------------------------------------------ the tests' side
    def marks(self) -> list[dict[str, Any]]:
        with self._state() as state:
            return list(state.get("marks", []))

    def calls_per_key(self) -> Counter[str]:
        """How many calls each key reached the downstream with."""
        return Counter(call["key"] for call in self.calls(KIND))

    def applications_per_key(self) -> Counter[str]:
        """How many calls of each key applied it (not merely got the first result back)."""
        return Counter(m["key"] for m in self.marks() if m["mark"] == AFTER and m["applied"])


cloud = MarkedCloud()
