"""Validation of input responses (ElicitResult, CreateMessageResult, ListRootsResult) against
the request they answer. Shared by MRTR, tasks/update, the dashboard and the REST API."""

from __future__ import annotations

from typing import Any

import jsonschema
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from mcptasks.tools.context import ELICIT, ROOTS, SAMPLE

ELICIT_ACTIONS = ("accept", "decline", "cancel")


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


# jsonschema fetches an unknown http(s) $ref by default; never do that (PROTOCOL §3.1, E16).
OFFLINE: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def offline_validator(schema: Any) -> jsonschema.Draft202012Validator:
    """A JSON Schema 2020-12 validator that resolves ``$ref`` only inside ``schema``; an
    external one raises ``referencing.exceptions.Unresolvable`` instead of being fetched."""
    return jsonschema.Draft202012Validator(schema, registry=OFFLINE)


class InvalidAnswer(ValueError):
    """The response does not fit the request; the message says why."""


def verdict_of(response: dict[str, Any]) -> tuple[str, str]:
    """The (verdict, comment) of a validated answer to an approval gate: ``accept`` with
    ``content.decision`` approve or reject; a reject needs a comment."""
    content = response.get("content") or {}
    if response.get("action") != "accept" or content.get("decision") not in ("approve", "reject"):
        raise InvalidAnswer(
            "an approval is decided with action accept and decision approve or reject"
        )
    comment = str(content.get("comment") or "").strip()
    if content["decision"] == "reject" and not comment:
        raise InvalidAnswer("a reject needs a comment saying why")
    return content["decision"], comment


def validate_response(method: str, params: dict[str, Any], response: Any) -> dict[str, Any]:
    """Return the response if it answers a ``method`` request with ``params``; else raise."""
    if not isinstance(response, dict):
        raise InvalidAnswer("the response must be an object")
    if method == ELICIT:
        action = response.get("action")
        if action not in ELICIT_ACTIONS:
            raise InvalidAnswer(f"action must be one of {', '.join(ELICIT_ACTIONS)}")
        content = response.get("content")
        if action != "accept":
            return {"action": action}
        if params.get("mode") == "url":
            return {"action": action}
        if content is None:
            content = {}
        if not isinstance(content, dict):
            raise InvalidAnswer("content must be an object")
        schema = params.get("requestedSchema") or {"type": "object"}
        try:
            errors = sorted(
                offline_validator(schema).iter_errors(content), key=lambda e: list(e.path)
            )
        except Unresolvable as exc:
            raise InvalidAnswer(f"the request's schema cannot be checked: {exc}") from None
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "content"
            raise InvalidAnswer(f"{where}: {errors[0].message}")
        return {"action": action, "content": content}
    if method == SAMPLE:
        if not isinstance(response.get("role"), str) or "content" not in response:
            raise InvalidAnswer("a sampling response needs role and content")
        return response
    if method == ROOTS:
        roots = response.get("roots")
        if not isinstance(roots, list) or not all(
            isinstance(r, dict) and isinstance(r.get("uri"), str) for r in roots
        ):
            raise InvalidAnswer("a roots response needs roots: [{uri, name?}]")
        return response
    raise InvalidAnswer(f"unknown input request method {method!r}")
