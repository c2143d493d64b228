"""The MCP client side of `bench/peers.py`, the same for every server: the 2026-07-28 wire (no
``initialize``: each request carries its protocol version and the tasks extension in ``_meta``,
the ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers), a bearer token where the
server takes one, and a small keep-alive HTTP/1.1 client on asyncio for the end-to-end workload.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from bench.common import percentile, read_response

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}
POLL_S = 0.05  # the same poll period for every server (each suggests its own pollIntervalMs)
TOOL, ARGUMENTS = "echo_task", {"text": "peer"}


@dataclass
class Peer:
    kind: str  # fastmcp | serve | uvicorn | daphne
    url: str  # the MCP endpoint
    token: str | None
    completed_task: str = ""

    def headers(self, method: str, name: str | None = None) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": method,
            "Mcp-Name": name or (TOOL if method == "tools/call" else self.completed_task),
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def get_body(self, task_id: str | None = None) -> bytes:
        return rpc("tasks/get", {"taskId": task_id or self.completed_task})

    def call_body(self) -> bytes:
        return rpc("tools/call", {"name": TOOL, "arguments": ARGUMENTS})


def rpc(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    ).encode()


class Connection:
    """One keep-alive HTTP/1.1 connection; ``post`` returns the JSON-RPC result (checked)."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        parts = urlsplit(peer.url)
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes, method: str, name: str | None = None) -> dict[str, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = [f"POST {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"{k}: {v}" for k, v in self.peer.headers(method, name).items()]
        head.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        status, answer = await read_response(self.reader)
        data = json.loads(answer)
        if status != 200 or "result" not in data:
            raise RuntimeError(f"{self.peer.url} {method}: {status} {answer[:300]!r}")
        return data["result"]  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def run_task(connection: Connection) -> tuple[str, int]:
    """Create one task and poll it to completion; its id and the number of polls."""
    created = await connection.post(connection.peer.call_body(), "tools/call")
    task_id = created.get("taskId") or created.get("task", {}).get("taskId")
    if created.get("resultType") != "task" or not task_id:
        raise RuntimeError(f"{connection.peer.url}: tools/call did not create a task: {created}")
    polls = 0
    while True:
        await asyncio.sleep(POLL_S)
        polls += 1
        got = await connection.post(connection.peer.get_body(task_id), "tasks/get", task_id)
        if got.get("status") == "completed":
            return task_id, polls
        if got.get("status") not in ("working", "submitted"):
            raise RuntimeError(f"{connection.peer.url}: task {task_id} ended {got}")


async def one_call(peer: Peer) -> str:
    """One task through, its completed tasks/get checked; the task's id (for tasks/get runs)."""
    connection = Connection(peer)
    try:
        task_id, _ = await run_task(connection)
        got = await connection.post(peer.get_body(task_id), "tasks/get", task_id)
        if got.get("taskId") != task_id or got.get("status") != "completed":
            raise RuntimeError(f"{peer.url}: tasks/get answered {got}")
        return task_id
    finally:
        connection.close()


async def end_to_end(peer: Peer, count: int, concurrency: int) -> dict[str, float]:
    """``count`` tasks created and polled to completion, ``concurrency`` at a time."""
    remaining = [count]
    latencies: list[float] = []
    polls: list[int] = []

    async def lane() -> None:
        connection = Connection(peer)
        try:
            while remaining[0] > 0:
                remaining[0] -= 1
                began = time.perf_counter()
                _, n = await run_task(connection)
                latencies.append(time.perf_counter() - began)
                polls.append(n)
        finally:
            connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "tasks": float(len(latencies)),
        "seconds": elapsed,
        "tasks_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * percentile(latencies, 0.5),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "polls_per_task": sum(polls) / max(len(polls), 1),
    }
