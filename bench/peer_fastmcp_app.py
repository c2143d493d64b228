"""The peer server of `bench/peers.py`: FastMCP + fastmcp-tasks (Docket on Redis) with one
no-op ``task=True`` tool, as an ASGI app for uvicorn (one process: Docket's worker runs in it).

    PEER_DOCKET_URL=redis://127.0.0.1:6379/5 uvicorn bench.peer_fastmcp_app:app
"""

from __future__ import annotations

import os

from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension

mcp = FastMCP("peer")
mcp.add_extension(
    TasksExtension(
        url=os.environ["PEER_DOCKET_URL"], name=os.environ.get("PEER_DOCKET_NAME", "peer")
    )
)


@mcp.tool(task=True)
async def echo_task(text: str) -> str:
    """No-op: answers its argument."""
    return text


app = mcp.http_app(path="/mcp", json_response=True, stateless_http=True)
