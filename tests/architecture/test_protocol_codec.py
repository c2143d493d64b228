"""The codec (mcptasks/protocol) imports no Django, directly or transitively: framing, errors,
headers and the method table's rules work over plain data, and settings reach them as
arguments. Checked in a fresh interpreter that refuses to import Django or the models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import importlib
import importlib.abc
import pkgutil
import sys

REFUSED = ("django", "mcptasks.models", "mcptasks.settings")


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == r or name.startswith(r + ".") for r in REFUSED):
            raise ImportError(f"the codec imported {name}")
        return None


sys.meta_path.insert(0, Refuse())

import mcptasks.protocol as codec

names = sorted(m.name for m in pkgutil.walk_packages(codec.__path__, "mcptasks.protocol."))
assert names, "no modules found"
for name in names:
    importlib.import_module(name)

from mcptasks.protocol import jsonrpc, methods
from mcptasks.protocol.errors import INVALID_REQUEST, METHOD_NOT_FOUND, McpError, invalid_params
from mcptasks.protocol.request_state import RequestState

message = jsonrpc.parse(b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}')
assert (message.id, message.method, message.is_notification) == (7, "tools/list", False)
try:
    jsonrpc.parse(b"[]")
except McpError as exc:
    assert exc.code == INVALID_REQUEST and exc.http_status == 400
else:
    raise AssertionError("a batch parsed")
error = jsonrpc.error_response(7, invalid_params("Failed to retrieve task: Task not found"))
assert error["error"]["code"] == -32602 and error["id"] == 7
try:
    methods.gate("initialize", {}, {}, {})
except McpError as exc:
    assert exc.code == METHOD_NOT_FOUND
assert methods.server_info("1.2.3") == {"name": "mcptasks", "version": "1.2.3"}
state = RequestState(principal_id=1, tenant_id=2, tool="t", argument_digest="d")
sealed = state.seal("a-key")
opened = RequestState.open(
    sealed, key="a-key", principal_id=1, tenant_id=2, tool="t", argument_digest="d"
)
assert opened.nonce == state.nonce
leaked = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
assert not leaked, leaked
print("ok", len(names))
"""


def test_the_protocol_codec_imports_no_django() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")


def test_the_codec_is_told_apart_from_its_adapter() -> None:
    """The probe itself refuses what it should: importing the adapter fails under it."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE.split("import mcptasks.protocol")[0] + "import mcptasks.mcp.http",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode != 0
    assert "the codec imported django" in done.stderr
