"""Inline execution of a tool in the request (``sync`` tools, ``auto`` tools for clients
without the tasks extension, and the questions a ``task`` tool asks before its task exists).

There is no task row: questions become an MRTR ``InputRequiredResult`` whose sealed
``requestState`` carries every answer so far, and the retry replays the function with them.
"""

from __future__ import annotations

import time
import uuid as uuid_module
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django.utils import timezone

from mcptasks.tools.answers import InvalidAnswer, validate_response
from mcptasks.tools.context import (
    ELICIT,
    ROOTS,
    SAMPLE,
    Answer,
    EffectKey,
    Question,
    Suspend,
    ToolContext,
    ToolDefinitionError,
    WaitTimedOut,
    form_secret_fields,
)

T = TypeVar("T")
MAX_INLINE_SLEEP_S = 30.0
# ``(message, progress, total)``: sends one notifications/progress for the open request.
ProgressSink = Callable[[str, float, float | None], None]


class InputRequired(Suspend):
    """The function needs answers it does not have: ``requests`` go to the client."""

    def __init__(self, requests: dict[str, dict[str, Any]]) -> None:
        super().__init__()
        self.requests = requests


class StartTask(Suspend):
    """A ``task`` tool finished its questions-before-the-task: create the task now."""


class InvalidInputResponse(Suspend):
    """An ``inputResponses`` entry does not answer the request the tool asks (-32602)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"inputResponses[{key!r}]: {reason}")
        self.key = key
        self.reason = reason


class TaskRequired(Suspend):
    """A question that only an operator (or someone other than the caller) may answer cannot be
    asked inline: the client would be answering it itself."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class MissingClientCapability(Exception):
    def __init__(self, capability: str) -> None:
        super().__init__(capability)
        self.capability = capability


class InlineContext(ToolContext):
    def __init__(
        self,
        *,
        tool_name: str,
        arguments: dict[str, Any],
        capabilities: dict[str, Any],
        answers: dict[str, dict[str, Any]],
        pre_task: bool = False,
        offered: dict[str, Any] | None = None,
        progress: ProgressSink | None = None,
    ) -> None:
        self.tool_name = tool_name
        # notifications/progress of this request (None without a progressToken and an SSE reply).
        self.progress = progress
        self.arguments = arguments
        self.capabilities = capabilities
        # Answers of earlier rounds (verified, from requestState); grows with this round's.
        self.answers = answers
        # This round's ``inputResponses``, not yet checked: each is validated against the request
        # the tool actually asks under its key, when it asks it; keys it never asks are ignored.
        self.offered = offered or {}
        self.pre_task = pre_task
        self.asked: dict[str, dict[str, Any]] = {}
        self.keys: set[str] = set()
        self.effect_ran = False

    def _plain_call(self) -> None:
        """Any call other than a pre-task question ends the pre-task phase."""
        if self.pre_task:
            raise StartTask()

    def _key(self, key: str) -> None:
        if key in self.keys:
            raise ToolDefinitionError(f"step key {key!r} used twice in one run")
        self.keys.add(key)

    def _need(self, capability: str) -> None:
        if capability not in self.capabilities:
            raise MissingClientCapability(capability)

    def _need_form_elicitation(self) -> None:
        """Form mode: ``elicitation: {}`` (form only) or one that lists ``form``; a client that
        declared only ``url`` mode cannot be sent a form (PROTOCOL §3.4)."""
        declared = self.capabilities.get("elicitation")
        if not isinstance(declared, dict) or (declared and "form" not in declared):
            raise MissingClientCapability("elicitation")

    def _gather(self, requests: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if self.effect_ran:
            raise ToolDefinitionError("an inline tool may call effect only after its last question")
        for key in requests:
            self._key(key)
        self.asked.update(requests)
        for key, request in requests.items():
            if key in self.answers or key not in self.offered:
                continue
            try:
                self.answers[key] = validate_response(
                    request["method"], request["params"], self.offered[key]
                )
            except InvalidAnswer as exc:
                raise InvalidInputResponse(key, str(exc)) from None
        missing = {k: r for k, r in requests.items() if k not in self.answers}
        if missing:
            raise InputRequired(missing)
        return {k: self.answers[k] for k in requests}

    def report(
        self, message: str, *, progress: float | None = None, total: float | None = None
    ) -> None:
        self._plain_call()
        self.check_progress(progress, total)
        if progress is not None and self.progress is not None:
            self.progress(str(message), progress, total)

    def ask_many(self, questions: dict[str, Question]) -> dict[str, Answer]:
        if self.pre_task and not all(q.before_task for q in questions.values()):
            raise StartTask()
        for key, question in questions.items():
            if question.audience != "client" or question.forbid_self_approval or question.gate:
                raise TaskRequired(key)
            secret = form_secret_fields(question.schema)
            if secret:
                raise ToolDefinitionError(
                    f"question {key!r} asks for {', '.join(secret)} in a form: form "
                    "elicitation must never request secrets (PROTOCOL §3.4)"
                )
        self._need_form_elicitation()
        answered = self._gather(
            {k: {"method": ELICIT, "params": q.params()} for k, q in questions.items()}
        )
        return {k: Answer.from_response(v) for k, v in answered.items()}

    def sample(
        self, key: str, messages: list[dict[str, Any]], *, max_tokens: int = 256, **params: Any
    ) -> dict[str, Any]:
        self._plain_call()
        self._need("sampling")
        return self._gather(
            {
                key: {
                    "method": SAMPLE,
                    "params": {"messages": messages, "maxTokens": max_tokens, **params},
                }
            }
        )[key]

    def roots(self, key: str) -> list[dict[str, Any]]:
        self._plain_call()
        self._need("roots")
        return list(self._gather({key: {"method": ROOTS, "params": {}}})[key].get("roots") or [])

    def effect(self, step: str, fn: Callable[[EffectKey], T], *, idempotent: bool = False) -> T:
        self._plain_call()
        self._key(step)
        self.effect_ran = True
        # A fresh key per call and no attempts: every inline call is its own first attempt.
        return fn(EffectKey(f"inline:{uuid_module.uuid4()}:{step}", fencing_token=1))

    def sleep(self, key: str, seconds: float) -> None:
        self._plain_call()
        self._key(key)
        time.sleep(max(0.0, min(seconds, MAX_INLINE_SLEEP_S)))

    def wait_until(
        self,
        key: str,
        check: Callable[[], bool],
        *,
        every: float = 5.0,
        timeout_s: float | None = None,
    ) -> None:
        self._plain_call()
        self._key(key)
        limit = min(timeout_s, MAX_INLINE_SLEEP_S) if timeout_s is not None else MAX_INLINE_SLEEP_S
        deadline = time.monotonic() + limit
        while not check():
            if time.monotonic() > deadline:
                if limit == timeout_s:
                    raise WaitTimedOut(f"Gave up waiting for {key!r} after {timeout_s:g} s")
                raise ToolDefinitionError(f"wait {key!r} did not finish inline")
            time.sleep(min(every, 1.0))

    def job(self, external_id: str) -> None:
        self._plain_call()

    def now(self) -> datetime:
        self._plain_call()
        return timezone.now()

    def uuid(self) -> uuid_module.UUID:
        self._plain_call()
        return uuid_module.uuid4()


def ask_together(ctx: ToolContext, *calls: Callable[[], Any]) -> tuple[Any, ...]:
    """Make several independent input calls (``ask``, ``sample``, ``roots``) as one round.

    Inline, every unanswered one goes out in a single ``InputRequiredResult`` instead of one
    round each. In a task the calls simply run in order (each suspends until answered). Returns
    the calls' results in order.
    """
    if not isinstance(ctx, InlineContext):
        return tuple(call() for call in calls)
    results: list[Any] = []
    pending: dict[str, dict[str, Any]] = {}
    for call in calls:
        try:
            results.append(call())
        except InputRequired as missing:
            pending.update(missing.requests)
    if pending:
        raise InputRequired(pending)
    return tuple(results)
