"""Fake downstream services for the demo pack. They honour idempotency keys and count every
call they receive, persistently (a JSON file under var/), so tests can prove exactly-once."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings


class FakeCloud:
    def __init__(self, path: Path | None = None) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        return self._path or Path(
            os.environ.get("MCPTASKS_FAKE_CLOUD", settings.VAR_DIR / "fake_cloud.json")
        )

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            raw = handle.read()
            state = json.loads(raw) if raw else {"calls": [], "applied": {}, "jobs": {}}
            yield state
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(state))
            handle.flush()

    def _apply(self, kind: str, key: str, make: dict[str, Any]) -> dict[str, Any]:
        with self._state() as state:
            state["calls"].append({"kind": kind, "key": key})
            if key in state["applied"]:
                return state["applied"][key]  # type: ignore[no-any-return]
            state["applied"][key] = make
            return make

    def calls(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._state() as state:
            return [c for c in state["calls"] if kind is None or c["kind"] == kind]

    def applied(self) -> dict[str, Any]:
        with self._state() as state:
            return dict(state["applied"])

    def reset(self) -> None:
        if self.path.exists():
            self.path.unlink()

    def build(self, key: str, service: str, version: str) -> dict[str, Any]:
        return self._apply(
            "build",
            key,
            {"build_id": f"b-{abs(hash(key)) % 10**8}", "service": service, "version": version},
        )

    def rollout(self, key: str, service: str, version: str, environment: str) -> dict[str, Any]:
        return self._apply(
            "rollout",
            key,
            {"rollout_id": f"r-{abs(hash(key)) % 10**8}", "environment": environment},
        )

    def write_batch(self, key: str, dataset: str, count: int) -> dict[str, Any]:
        return self._apply("batch", key, {"dataset": dataset, "rows": count})

    def submit_job(self, key: str, spec: str) -> dict[str, Any]:
        result = self._apply("submit", key, {"job_id": f"job-{abs(hash(key)) % 10**8}"})
        with self._state() as state:
            state["jobs"].setdefault(result["job_id"], {"spec": spec, "at": time.time()})
        return result

    def job_status(self, job_id: str, duration_s: float = 2.0) -> str:
        with self._state() as state:
            job = state["jobs"].get(job_id)
        if job is None:
            return "unknown"
        return "done" if time.time() - job["at"] >= duration_s else "running"


fake_cloud = FakeCloud()
