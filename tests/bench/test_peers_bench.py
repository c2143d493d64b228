"""The peer section of `make bench` (bench/peers.py): its client's wire and its verdicts, without
starting servers (the bench itself runs them)."""

from __future__ import annotations

import asyncio
import json

from bench.common import read_response
from bench.peer_client import META, Peer
from bench.peers import TARGETS, ratios, table


def _read(raw: bytes) -> tuple[int, bytes]:
    async def go() -> tuple[int, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await read_response(reader)

    return asyncio.run(go())


def test_read_response_reads_a_sized_and_a_chunked_body() -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"
    chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    assert _read(sized) == (200, b"{}")
    assert _read(chunked) == (404, b"abcde")


def test_peer_requests_carry_the_2026_wire_and_the_token_only_where_taken() -> None:
    mcptasks = Peer("uvicorn", "http://127.0.0.1:1/mcp", "secret", completed_task="t1")
    fastmcp = Peer("fastmcp", "http://127.0.0.1:2/mcp", None, completed_task="t2")
    assert mcptasks.headers("tasks/get")["Authorization"] == "Bearer secret"
    assert "Authorization" not in fastmcp.headers("tasks/get")
    assert fastmcp.headers("tasks/get")["Mcp-Name"] == "t2"
    assert fastmcp.headers("tools/call")["Mcp-Name"] == "echo_task"
    assert fastmcp.headers("tools/call")["MCP-Protocol-Version"] == "2026-07-28"
    body = json.loads(fastmcp.get_body("t9"))
    assert body["params"] == {"taskId": "t9", "_meta": META}
    assert (
        "io.modelcontextprotocol/tasks"
        in META["io.modelcontextprotocol/clientCapabilities"]["extensions"]
    )


def test_ratios_and_table_judge_mcptasks_against_fastmcp_by_the_targets() -> None:
    def row(rps: float, key: str = "rps") -> dict[str, float]:
        return {key: rps, "p50_ms": 1.0, "p99_ms": 2.0}

    results = {
        "fastmcp": {"get": row(100), "create": row(100), "e2e": row(10, "tasks_per_s")},
        "mcptasks_uvicorn": {
            "get": row(300),
            "create": row(100),
            "e2e": row(20, "tasks_per_s"),
            "create_open_loop_50pct": {"rps": 50, "p50_ms": 5.0, "p99_ms": 60.0},
        },
    }
    ratio = ratios(results)
    assert ratio == {"mcptasks_uvicorn": {"get": 3.0, "create": 1.0, "e2e": 2.0}}
    lines = "\n".join(table(results, ratio))
    assert f"3.00×   {TARGETS['get']:.1f}× pass" in lines
    assert f"1.00×   {TARGETS['create']:.1f}× FAIL" in lines
    assert "p99 target < 50 ms FAIL" in lines
