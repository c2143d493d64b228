"""What a tool function sees: the ``ToolContext`` interface and its value types (DESIGN §4).

Two implementations: ``mcptasks.runner.TaskContext`` (replayed, durable, a task) and
``mcptasks.tools.inline.InlineContext`` (in the request, MRTR). Every call is a cancellation
safe point in a task.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")

ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
ROOTS = "roots/list"


def declares_input_kind(capabilities: dict[str, Any], method: str, params: dict[str, Any]) -> bool:
    """Did a request declare what an input request of ``method`` needs (PROTOCOL M9)? Form
    elicitation: ``elicitation: {}`` or one listing ``form``; URL elicitation: ``url``."""
    if method == "elicitation/create":
        declared = capabilities.get("elicitation")
        if not isinstance(declared, dict):
            return False
        if params.get("mode") == "url":
            return "url" in declared
        return not declared or "form" in declared
    needed = {"sampling/createMessage": "sampling", "roots/list": "roots"}.get(method)
    return needed is not None and isinstance(capabilities.get(needed), dict)


def form_secret_fields(schema: dict[str, Any]) -> list[str]:
    """Properties of a form that ask for a secret: form elicitation must never request one
    (PROTOCOL §3.4; the redactor's sensitive-key rule decides)."""
    from audit.redact import is_sensitive_key

    return [name for name in (schema.get("properties") or {}) if is_sensitive_key(name)]


class ToolError(Exception):
    """Raised by a tool for a business failure: the result is ``isError: true`` (not failed)."""


class WaitTimedOut(ToolError):
    """``ctx.wait_until(..., timeout_s=...)`` gave up: the check never passed in time. Unless
    the tool catches it, the task completes with ``isError: true`` saying so."""


class EffectKey(str):
    """What an effect function receives: the idempotency key (a ``str``, derived from the task
    and the step), carrying the attempt's fencing token. The token grows with every attempt
    of the task; a downstream that remembers the highest token it saw per key and refuses a
    lower one cannot be reached by a stale attempt (a paused worker that resumes after another
    attempt took over)."""

    fencing_token: int

    def __new__(cls, key: str, fencing_token: int) -> EffectKey:
        value = super().__new__(cls, key)
        value.fencing_token = fencing_token
        return value


class ToolDefinitionError(Exception):
    """The tool broke a rule of the tool API (e.g. ask after effect inline, duplicate key)."""


class NonDeterministicTool(ToolDefinitionError):
    """A replay took a different path than the recorded run."""


class Suspend(BaseException):
    """Stops the tool function; derived from BaseException so ``except Exception`` can't eat it."""


@dataclass(frozen=True)
class Answer:
    """The answer to one input request. ``action`` is accept / decline / cancel (or
    ``timeout`` when an input wait expired and the tool asked to handle it)."""

    action: str
    content: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    @classmethod
    def from_response(cls, response: dict[str, Any]) -> Answer:
        return cls(
            action=str(response.get("action", "accept")),
            content=dict(response.get("content") or {}),
            raw=response,
        )


@dataclass(frozen=True)
class ApprovalPolicy:
    """Who must approve a gate: ``required`` approvals from the eligible set — holders of
    ``roles`` in the task's tenant, members of its reviewer ``groups``, the named ``users``
    (usernames) and, with ``named_approvers``, the task's named approvers. Never the requester, the issuer of the creating
    token, or an auditor (access.may_decide). ``audience`` ``client`` lets the calling client
    decide through ``tasks/update`` (its requester rule still holds). ``redact``: argument
    fields the approval page masks (a tenant's rule may add more)."""

    required: int = 1
    roles: tuple[str, ...] = ("operator",)
    groups: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    audience: str = "operator"
    named_approvers: bool = True  # may an operator name an approver of one task?
    redact: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        policy: dict[str, Any] = {
            "required": self.required,
            "roles": list(self.roles),
            "groups": list(self.groups),
            "users": list(self.users),
            "audience": self.audience,
            "named_approvers": self.named_approvers,
        }
        if self.redact:
            policy["redact"] = sorted(set(self.redact))
        return policy


# The form an approval gate shows a client (tasks/update): a decision and a comment.
GATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "reject"], "title": "Decision"},
        "comment": {"type": "string", "title": "Comment (required to reject)"},
    },
    "required": ["decision"],
}


@dataclass(frozen=True)
class ReviewerDecision:
    reviewer: str
    verdict: str
    comment: str
    at: str


@dataclass(frozen=True)
class ApprovalOutcome:
    """What an approval gate came to: ``approved``, ``rejected`` (with the rejecting comment)
    or ``expired`` (the gate's wait ran out and the tool asked to handle it)."""

    status: str
    decisions: tuple[ReviewerDecision, ...] = ()

    @property
    def approved(self) -> bool:
        return self.status == "approved"

    @property
    def rejected(self) -> bool:
        return self.status == "rejected"

    @property
    def comment(self) -> str:
        """The rejecting reviewer's comment (empty unless rejected)."""
        return next((d.comment for d in self.decisions if d.verdict == "reject"), "")

    @classmethod
    def from_response(cls, response: dict[str, Any]) -> ApprovalOutcome:
        content = response.get("content") or {}
        return cls(
            status=str(content.get("outcome", "rejected")),
            decisions=tuple(
                ReviewerDecision(
                    reviewer=str(d.get("reviewer", "")),
                    verdict=str(d.get("verdict", "")),
                    comment=str(d.get("comment", "")),
                    at=str(d.get("at", "")),
                )
                for d in content.get("decisions") or []
            ),
        )


@dataclass(frozen=True)
class Question:
    """One elicitation: a message, a flat JSON schema, and who may answer."""

    message: str
    schema: dict[str, Any]
    audience: str = "client"
    forbid_self_approval: bool = False
    before_task: bool = False
    timeout_s: float | None = None
    # Set for an approval gate (ctx.approve): {"summary": {...}, "policy": {...}}.
    gate: dict[str, Any] | None = None

    def params(self) -> dict[str, Any]:
        return {"mode": "form", "message": self.message, "requestedSchema": self.schema}


class ToolContext:
    """The interface tools call. Subclasses implement the primitives."""

    tool_name: str
    arguments: dict[str, Any]

    def report(
        self, message: str, *, progress: float | None = None, total: float | None = None
    ) -> None:
        """Say how the work is going. In a task: the ``statusMessage`` of ``tasks/get``
        (throttled). Inline, with ``progress`` (increasing; ``total`` if known) and a request
        that carried a ``progressToken``: a ``notifications/progress`` on the response stream."""
        raise NotImplementedError

    @staticmethod
    def check_progress(progress: float | None, total: float | None) -> None:
        """``report``'s ``progress`` and ``total`` are numbers (or None), inline and in a task."""
        for name, value in (("progress", progress), ("total", total)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ToolDefinitionError(f"report({name}=...) must be a number")

    def ask(
        self,
        key: str,
        message: str,
        schema: dict[str, Any],
        *,
        audience: str = "client",
        forbid_self_approval: bool = False,
        before_task: bool = False,
        timeout_s: float | None = None,
    ) -> Answer:
        """Ask one question; returns its Answer once answered (suspends until then)."""
        question = Question(
            message=message,
            schema=schema,
            audience=audience,
            forbid_self_approval=forbid_self_approval,
            before_task=before_task,
            timeout_s=timeout_s,
        )
        return self.ask_many({key: question})[key]

    def ask_many(self, questions: dict[str, Question]) -> dict[str, Answer]:
        """Ask several questions at once; returns when every one is answered."""
        raise NotImplementedError

    def approve(
        self,
        key: str,
        message: str,
        *,
        summary: dict[str, Any] | None = None,
        policy: ApprovalPolicy | None = None,
        timeout_s: float | None = None,
    ) -> ApprovalOutcome:
        """An approval gate: suspends until the policy's reviewers have decided — open at
        ``required`` approvals, closed at the first reject — and returns the outcome. Only in
        a task. ``summary`` names what is approved (shown to reviewers, e.g. service, version)."""
        policy = policy or ApprovalPolicy()
        if policy.required < 1 or policy.audience not in ("operator", "client"):
            raise ToolDefinitionError(
                "an approval policy needs required >= 1 and audience operator or client"
            )
        question = Question(
            message=message,
            schema=GATE_SCHEMA,
            # A client-audience gate may also be decided from an MCP client (tasks/update).
            audience="any" if policy.audience == "client" else "operator",
            forbid_self_approval=True,
            timeout_s=timeout_s,
            gate={"summary": dict(summary or {}), "policy": policy.as_json()},
        )
        answer = self.ask_many({key: question})[key]
        if answer.action == "timeout":
            return ApprovalOutcome(status="expired")
        return ApprovalOutcome.from_response(answer.raw)

    def sample(
        self, key: str, messages: list[dict[str, Any]], *, max_tokens: int = 256, **params: Any
    ) -> dict[str, Any]:
        """``sampling/createMessage``; returns the client's CreateMessageResult."""
        raise NotImplementedError

    def roots(self, key: str) -> list[dict[str, Any]]:
        """``roots/list``; returns the client's roots."""
        raise NotImplementedError

    def effect(self, step: str, fn: Callable[[EffectKey], T], *, idempotent: bool = False) -> T:
        """Run a side effect once; ``fn`` receives the idempotency key to pass downstream, an
        :class:`EffectKey` whose ``fencing_token`` the downstream should check too."""
        raise NotImplementedError

    def sleep(self, key: str, seconds: float) -> None:
        raise NotImplementedError

    def wait_until(
        self,
        key: str,
        check: Callable[[], bool],
        *,
        every: float = 5.0,
        timeout_s: float | None = None,
    ) -> None:
        """Durable polling: suspend and re-check every ``every`` seconds until ``check()``.
        With ``timeout_s``, raise :class:`WaitTimedOut` once that long passed since the first
        check without it passing (an outcome recorded like any step)."""
        raise NotImplementedError

    def job(self, external_id: str) -> None:
        """Record the backend job id this task maps to."""
        raise NotImplementedError

    def now(self) -> datetime:
        raise NotImplementedError

    def uuid(self) -> uuid.UUID:
        raise NotImplementedError
