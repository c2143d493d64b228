"""The demo downstream (mcptasks/tools/fakes.py) is crash-safe and fences stale attempts
(issue 20, points 2 and 3). No database: the fake cloud is a file."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcptasks.tools.context import EffectKey
from mcptasks.tools.fakes import FakeCloud, StaleFencingToken

REPO = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("MCPTASKS_FAKE_CLOUD_KILLS", "50"))

# A writer that applies keys one after another, printing each key once its write returned.
WRITER = """
import sys
from pathlib import Path
from mcptasks.tools.fakes import FakeCloud

cloud = FakeCloud(Path(sys.argv[1]))
first = int(sys.argv[2])
for number in range(first, first + 100_000):
    key = f"task:{number}"
    cloud.write_batch(key, "x" * 2000, number)  # a few hundred kB of state per write
    print(key, flush=True)
"""


def test_a_stale_fencing_token_is_refused_and_applies_nothing(tmp_path: Path) -> None:
    cloud = FakeCloud(tmp_path / "cloud.json")
    newer = cloud.rollout(EffectKey("t:rollout", fencing_token=3), "svc", "1.0", "staging")
    with pytest.raises(StaleFencingToken, match="fencing token 1 is older than 3"):
        cloud.rollout(EffectKey("t:rollout", fencing_token=1), "svc", "1.0", "staging")
    assert cloud.applied() == {"t:rollout": newer}
    assert [c.get("refused") for c in cloud.calls("rollout")] == [None, 1]
    # The same or a newer token, or a plain key, is served (the key is honoured as before).
    assert cloud.rollout(EffectKey("t:rollout", fencing_token=3), "svc", "1.0", "x") == newer
    assert cloud.rollout("t:rollout", "svc", "1.0", "x") == newer


def test_kill_9_inside_its_writes_never_loses_or_corrupts_its_state(tmp_path: Path) -> None:
    path = tmp_path / "cloud.json"
    rng = random.Random(20)
    acknowledged: list[str] = []
    env = {**os.environ, "PYTHONPATH": str(REPO), "DJANGO_SETTINGS_MODULE": "mcptasks.settings"}
    for kill in range(KILLS):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(kill * 1000)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert writer.stdout is not None
        # Let it acknowledge a write or two, then kill it at a random moment of the next ones.
        acknowledged.append(writer.stdout.readline().strip())
        time.sleep(rng.uniform(0.0, 0.03))
        writer.send_signal(signal.SIGKILL)
        rest, _ = writer.communicate()
        acknowledged += [line for line in rest.splitlines() if line]
        state = json.loads(path.read_text())  # whole, valid JSON after every kill
        missing = [key for key in acknowledged if key not in state["applied"]]
        assert missing == [], f"kill {kill + 1}: acknowledged writes lost: {missing[:5]}"
    assert len(FakeCloud(path).applied()) >= len(acknowledged) >= KILLS
