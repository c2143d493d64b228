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

EMPTY: dict[str, Any] = {"calls": [], "applied": {}, "jobs": {}, "fences": {}}


class StaleFencingToken(Exception):
    """A call whose fencing token is lower than one already seen for its key: it comes from an
    attempt that has since been replaced (a paused worker that woke up). Nothing was applied."""


class FakeCloud:
    """One JSON file, rewritten whole on each change: to a temporary file, fsync'ed, renamed
    over the old one (and the directory fsync'ed), under an exclusive lock on a separate lock
    file. A process killed at any point leaves either the old state or the new one."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        return self._path or Path(
            os.environ.get("MCPTASKS_FAKE_CLOUD", settings.VAR_DIR / "fake_cloud.json")
        )

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                raw = path.read_text()
            except FileNotFoundError:
                raw = ""
            state = json.loads(raw) if raw else json.loads(json.dumps(EMPTY))
            yield state
            new = json.dumps(state)
            if new != raw:
                self._replace(path, new)

    @staticmethod
    def _replace(path: Path, content: str) -> None:
        temporary = path.with_name(path.name + ".tmp")  # one writer at a time: the lock's
        with open(temporary, "w") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _apply(
        self, kind: str, key: str, make: dict[str, Any], fencing_token: int | None = None
    ) -> dict[str, Any]:
        with self._state() as state:
            fences = state.setdefault("fences", {})
            newest = fences.get(key, 0)
            if fencing_token is not None and fencing_token < newest:
                # Recorded (the state is written when the block ends), then refused below.
                state["calls"].append({"kind": kind, "key": key, "refused": fencing_token})
            else:
                if fencing_token is not None:
                    fences[key] = fencing_token
                state["calls"].append({"kind": kind, "key": key})
                if key not in state["applied"]:
                    state["applied"][key] = make
                return state["applied"][key]  # type: ignore[no-any-return]
        raise StaleFencingToken(
            f"{kind} {key}: fencing token {fencing_token} is older than {newest}, "
            "the newest seen for this key; nothing was applied"
        )

    def calls(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._state() as state:
            return [c for c in state["calls"] if kind is None or c["kind"] == kind]

    def applied(self) -> dict[str, Any]:
        with self._state() as state:
            return dict(state["applied"])

    def reset(self) -> None:
        self.path.unlink(missing_ok=True)

    @staticmethod
    def _fence(key: str) -> int | None:
        """The fencing token an effect's key carries (``ctx.effect`` passes an EffectKey)."""
        return getattr(key, "fencing_token", None)

    def build(self, key: str, service: str, version: str) -> dict[str, Any]:
        return self._apply(
            "build",
            key,
            {"build_id": f"b-{abs(hash(key)) % 10**8}", "service": service, "version": version},
            self._fence(key),
        )

    def rollout(self, key: str, service: str, version: str, environment: str) -> dict[str, Any]:
        return self._apply(
            "rollout",
            key,
            {"rollout_id": f"r-{abs(hash(key)) % 10**8}", "environment": environment},
            self._fence(key),
        )

    def write_batch(self, key: str, dataset: str, count: int) -> dict[str, Any]:
        return self._apply("batch", key, {"dataset": dataset, "rows": count}, self._fence(key))

    def submit_job(self, key: str, spec: str) -> dict[str, Any]:
        result = self._apply(
            "submit", key, {"job_id": f"job-{abs(hash(key)) % 10**8}"}, self._fence(key)
        )
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
