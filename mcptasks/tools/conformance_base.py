"""Fixture tools of the official suite's base scenarios (server-stateless,
input-required-result-*). Loaded only in conformance mode.

Each is an ordinary ``sync`` tool of the tool API: it runs inline, and its questions become MRTR
``InputRequiredResult`` rounds whose sealed ``requestState`` carries the answers so far.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcptasks.tools import ToolContext, tool
from mcptasks.tools.inline import ask_together

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _sample_text(response: dict[str, Any]) -> str:
    """The text of a CreateMessageResult (content is one block or a list of blocks)."""
    content = response.get("content")
    blocks = content if isinstance(content, list) else [content]
    return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict)).strip()


def _user_message(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": {"type": "text", "text": text}}]


# ---------------------------------------------------------------- server-stateless diagnostics
@tool(policy="sync", required_capabilities={"sampling": {}})
def test_missing_capability(ctx: ToolContext) -> str:
    """Ask the client's model a question; needs the sampling capability (-32021 without it)."""
    response = ctx.sample("probe", _user_message("Reply with OK."), max_tokens=10)
    return f"sampling answered: {_sample_text(response)}"


@tool(policy="sync")
def test_streaming_elicitation(ctx: ToolContext) -> str:
    """Ask for confirmation through MRTR (never a server-to-client request on the stream)."""
    answer = ctx.ask(
        "confirm",
        "Continue?",
        {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    )
    return f"confirmation: {answer.action}"


@tool(policy="sync")
def test_logging_tool(ctx: ToolContext) -> str:
    """Report progress while working; no log notification goes out without a logLevel."""
    ctx.report("logging tool ran")
    return "logging tool finished"


# ---------------------------------------------------------------- input-required-result-*
@tool(policy="sync")
def test_input_required_result_elicitation(ctx: ToolContext) -> str:
    """Ask for the user's name (one elicitation), then greet."""
    answer = ctx.ask("user_name", "What is your name?", NAME_SCHEMA)
    if not answer.accepted:
        return f"No name given ({answer.action})."
    return f"Hello, {answer.content['name']}!"


@tool(policy="sync")
def test_input_required_result_sampling(ctx: ToolContext) -> str:
    """Ask the client's model for the capital of France (one sampling request)."""
    response = ctx.sample(
        "capital_question", _user_message("What is the capital of France?"), max_tokens=100
    )
    return f"The model answered: {_sample_text(response)}"


@tool(policy="sync")
def test_input_required_result_list_roots(ctx: ToolContext) -> str:
    """Ask the client for its roots (one roots/list request) and list them."""
    roots = ctx.roots("client_roots")
    uris = ", ".join(root["uri"] for root in roots) or "none"
    return f"Client roots: {uris}"


@tool(policy="sync")
def test_input_required_result_request_state(ctx: ToolContext) -> str:
    """Ask for confirmation; the answer comes back through the sealed requestState."""
    answer = ctx.ask(
        "confirm",
        "Please confirm",
        {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    )
    return f"state-ok: confirmed={answer.content.get('ok', False)} ({answer.action})"


@tool(policy="sync")
def test_input_required_result_multiple_inputs(ctx: ToolContext) -> str:
    """Ask for a name, a sampled greeting and the client's roots, all in one round."""
    name, greeting, roots = ask_together(
        ctx,
        lambda: ctx.ask("user_name", "What is your name?", NAME_SCHEMA),
        lambda: ctx.sample("greeting", _user_message("Generate a greeting"), max_tokens=50),
        lambda: ctx.roots("client_roots"),
    )
    return (
        f"{_sample_text(greeting)} {name.content.get('name', '')} "
        f"(roots: {', '.join(root['uri'] for root in roots) or 'none'})"
    )


@tool(policy="sync")
def test_input_required_result_multi_round(ctx: ToolContext) -> str:
    """Ask two questions in two rounds: the second is asked only once the first is answered."""
    name = ctx.ask("step1", "Step 1: What is your name?", NAME_SCHEMA)
    color = ctx.ask(
        "step2",
        "Step 2: What is your favorite color?",
        {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
    )
    return f"{name.content.get('name')} likes {color.content.get('color')}"


@tool(policy="sync")
def test_input_required_result_tampered_state(ctx: ToolContext) -> str:
    """Ask for confirmation; a retry whose requestState was altered is refused (-32602)."""
    answer = ctx.ask(
        "confirm",
        "Please confirm",
        {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    )
    return f"confirmed: {answer.content.get('ok', False)}"


@tool(policy="sync")
def test_input_required_result_capabilities(ctx: ToolContext) -> str:
    """Ask through every input kind the client declared on this request, and no other."""
    declared = getattr(ctx, "capabilities", {})
    calls: list[Callable[[], Any]] = []
    if "elicitation" in declared:
        calls.append(lambda: ctx.ask("user_name", "What is your name?", NAME_SCHEMA).content)
    if "sampling" in declared:
        calls.append(
            lambda: _sample_text(
                ctx.sample("greeting", _user_message("Generate a greeting"), max_tokens=50)
            )
        )
    if "roots" in declared:
        calls.append(lambda: ctx.roots("client_roots"))
    answers = ask_together(ctx, *calls)
    return f"Received {len(answers)} answer(s) for the declared capabilities."
