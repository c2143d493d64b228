"""Fixture tools of the official suite's base scenarios (server-stateless, tools-call-*,
input-required-result-*, json-schema-2020-12, http-custom-header-server-validation). Loaded only
in conformance mode.

Each is an ordinary ``sync`` tool of the tool API: it runs inline, and its questions become MRTR
``InputRequiredResult`` rounds whose sealed ``requestState`` carries the answers so far.
"""

from __future__ import annotations

import base64
import io
import struct
import wave
import zlib
from collections.abc import Callable
from typing import Any

from mcptasks.tools import ToolContext, ToolError, tool
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


# ---------------------------------------------------------------- tools-call-*, json-schema, headers
def _tiny_png() -> str:
    """A 1x1 red pixel PNG, base64."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte, then one red pixel
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
    return base64.b64encode(png + chunk(b"IEND", b"")).decode()


def _tiny_wav() -> str:
    """A 10 ms silent mono 8 kHz 16-bit WAV, base64."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(b"\x00\x00" * 80)
    return base64.b64encode(buffer.getvalue()).decode()


RED_PIXEL_PNG = _tiny_png()
SILENT_WAV = _tiny_wav()


@tool(policy="sync")
def test_simple_text(ctx: ToolContext) -> str:
    """Answer with one text block."""
    return "This is a simple text response for testing."


@tool(policy="sync")
def test_image_content(ctx: ToolContext) -> dict[str, Any]:
    """Answer with one image block (a 1x1 red PNG)."""
    return {"content": [{"type": "image", "data": RED_PIXEL_PNG, "mimeType": "image/png"}]}


@tool(policy="sync")
def test_audio_content(ctx: ToolContext) -> dict[str, Any]:
    """Answer with one audio block (10 ms of silence, WAV)."""
    return {"content": [{"type": "audio", "data": SILENT_WAV, "mimeType": "audio/wav"}]}


def _resource(uri: str, mime_type: str, text: str) -> dict[str, Any]:
    """An embedded text resource block."""
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": text}}


@tool(policy="sync")
def test_embedded_resource(ctx: ToolContext) -> dict[str, Any]:
    """Answer with one embedded text resource."""
    text = "This is an embedded resource content."
    return {"content": [_resource("test://embedded-resource", "text/plain", text)]}


@tool(policy="sync")
def test_multiple_content_types(ctx: ToolContext) -> dict[str, Any]:
    """Answer with a text, an image and an embedded resource block."""
    data = '{"test":"data","value":123}'
    return {
        "content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": RED_PIXEL_PNG, "mimeType": "image/png"},
            _resource("test://mixed-content-resource", "application/json", data),
        ]
    }


@tool(policy="sync")
def test_error_handling(ctx: ToolContext) -> str:
    """Always fail with a tool error (isError: true)."""
    raise ToolError("This tool intentionally returns an error for testing")


@tool(policy="sync")
def test_tool_with_progress(ctx: ToolContext) -> str:
    """Report progress 0, 50 and 100 of 100, ~50 ms apart (notifications/progress inline)."""
    ctx.report("starting", progress=0, total=100)
    ctx.sleep("first-half", 0.05)
    ctx.report("halfway", progress=50, total=100)
    ctx.sleep("second-half", 0.05)
    ctx.report("done", progress=100, total=100)
    return "Progress tool finished after 3 progress reports."


JSON_SCHEMA_2020_12_INPUT: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@tool(
    "json_schema_2020_12_tool",
    description="Tool with JSON Schema 2020-12 features",
    input_schema=JSON_SCHEMA_2020_12_INPUT,
    policy="sync",
)
def json_schema_2020_12_tool(ctx: ToolContext, **arguments: Any) -> dict[str, Any]:
    """Echo the (schema-validated) arguments."""
    return {"received": arguments}


@tool(
    input_schema={
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        "required": ["region"],
        "additionalProperties": False,
    },
    policy="sync",
)
def test_header_param(ctx: ToolContext, region: str) -> str:
    """Echo `region`, which the client also sends as the Mcp-Param-Region header (SEP-2243)."""
    return f"region: {region}"
