"""Tools of the secret-corpus test (tests/security/test_secret_corpus.py): each takes a payload
and a sentence full of secrets and puts them where a tool can — the status message, a question,
an error, a traceback, stdout, the result. Loaded through MCPTASKS_TOOL_PACKS by that test's
processes only; not part of the demo pack."""

from __future__ import annotations

import json
from typing import Any

from mcptasks.tools import ToolContext, ToolError, tool


@tool(policy="task", sensitive=frozenset({"deploy_pin"}))
def corpus_roundtrip(
    ctx: ToolContext, payload: dict[str, Any], prose: str, deploy_pin: str = ""
) -> dict[str, Any]:
    """Report, ask (anyone may answer), then return everything it was given and told."""
    ctx.report(f"checking {prose}")
    answer = ctx.ask(
        "confirm",
        f"Deploy with {prose}?",
        {
            "type": "object",
            "properties": {"note": {"type": "string", "title": f"Note on {prose}"}},
        },
        audience="any",
    )
    return {"payload": payload, "prose": prose, "deploy_pin": deploy_pin, "answer": answer.content}


@tool(policy="task")
def corpus_tool_error(ctx: ToolContext, payload: dict[str, Any], prose: str) -> str:
    """Fail with a tool error quoting its input."""
    ctx.report(f"refusing {prose}")
    raise ToolError(f"refused {prose} for {json.dumps(payload)}")


@tool(policy="task")
def corpus_crash(ctx: ToolContext, payload: dict[str, Any], prose: str) -> str:
    """Print its input, then raise an unexpected exception quoting it (a traceback)."""
    ctx.report(f"about to deploy {prose}")
    print(f"corpus_crash stdout: {prose}", flush=True)
    raise RuntimeError(f"cannot deploy {prose} with {payload!r}")
