"""Input and output serializers of the REST API's tasks and tokens (audit's are audit.serializers).

Input serializers only parse and validate; output serializers only render. None of them saves:
every write goes through lifecycle (tasks) or the token and export services (STYLE rule 4).
"""

from __future__ import annotations

from typing import Any, cast

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from audit.redact import redact_text
from audit.serializers import AuditEventSerializer
from mcptasks import access, queries, wire
from mcptasks.lifecycle import RECONCILE_DECISIONS
from mcptasks.models import Effect, InputState, Task, TaskState
from mcptasks.wire import detailed_for

WIRE_STATUSES = ("working", "input_required", "completed", "failed", "cancelled")


# ---------------------------------------------------------------- the wire task (docs only)
class InputRequestWireSerializer(serializers.Serializer):
    method = serializers.CharField()
    params = serializers.DictField()


class DetailedTaskSerializer(serializers.Serializer):
    """The MCP DetailedTask the caller's tasks/get returns for this task."""

    taskId = serializers.CharField()
    status = serializers.ChoiceField(choices=WIRE_STATUSES)
    createdAt = serializers.CharField()
    lastUpdatedAt = serializers.CharField()
    ttlMs = serializers.IntegerField(allow_null=True)
    pollIntervalMs = serializers.IntegerField()
    statusMessage = serializers.CharField(required=False)
    inputRequests = serializers.DictField(child=InputRequestWireSerializer(), required=False)
    result = serializers.JSONField(required=False)
    error = serializers.DictField(required=False)


# ---------------------------------------------------------------- tasks: output
class TaskSummarySerializer(serializers.Serializer):
    """One row of the task list."""

    id = serializers.CharField(source="pk")
    tenant = serializers.CharField(source="tenant.slug")
    principal = serializers.CharField(source="principal.username")
    tool = serializers.CharField(source="tool_name")
    state = serializers.ChoiceField(
        choices=TaskState.choices, help_text="The internal state (richer than the wire status)."
    )
    status = serializers.SerializerMethodField(
        help_text="The MCP wire status this viewer sees (what their tasks/get says)."
    )
    status_message = serializers.SerializerMethodField(help_text="Redacted.")
    backend_job_id = serializers.CharField()
    version = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(serializers.ChoiceField(choices=WIRE_STATUSES))
    def get_status(self, task: Task) -> str:
        # The viewer's status (wire.viewer_statuses), read once for the whole page of a list.
        statuses = self.context.get("viewer_statuses")
        if statuses is None or task.pk not in statuses:
            request = self.context.get("request")
            viewer = self.context.get("viewer") or getattr(request, "user", None)
            parent = self.parent
            page = parent.instance if isinstance(parent, serializers.ListSerializer) else None
            statuses = wire.viewer_statuses(viewer, list(page or [task]))
            cast(dict[str, Any], self.context)["viewer_statuses"] = statuses
        return statuses[task.pk]

    def get_status_message(self, task: Task) -> str:
        return redact_text(task.status_message or "")


@extend_schema_field({"type": "string", "description": " | ".join(InputState.values)})
class InputStateField(serializers.CharField):
    """An input request's state. Documented without an enum component: drf-spectacular would
    name it after the field, as the task's state."""


class InputRequestSerializer(serializers.Serializer):
    """An input request of the task, its answer redacted."""

    # Renders a queries.InputView (the request, the viewer's decision, the redacted answer).

    key = serializers.CharField(source="request.key")
    method = serializers.CharField(source="request.method")
    params = serializers.DictField(
        help_text="The question as the tool asked it, redacted (the owner's own tasks/get, in "
        "the task field, has it whole)."
    )
    audience = serializers.CharField(source="request.audience")
    forbid_self_approval = serializers.BooleanField(source="request.forbid_self_approval")
    state = InputStateField(source="request.state")
    deadline_at = serializers.DateTimeField(source="request.deadline_at", allow_null=True)
    created_at = serializers.DateTimeField(source="request.created_at")
    answered_by = serializers.CharField(
        source="request.answered_by.username", allow_null=True, default=None
    )
    answered_via = serializers.CharField(source="request.answered_via")
    answered_at = serializers.DateTimeField(source="request.answered_at", allow_null=True)
    response = serializers.JSONField(
        allow_null=True, help_text="The answer, redacted (schema-marked secrets included)."
    )
    can_answer = serializers.SerializerMethodField(
        help_text="Whether the viewer may answer it (audience, grants, separation of duties)."
    )

    def get_can_answer(self, view: queries.InputView) -> bool:
        return view.decision is not None and bool(view.decision)


class EffectSerializer(serializers.Serializer):
    """A side effect of a task; its result is redacted."""

    id = serializers.IntegerField()
    step = serializers.CharField()
    idempotency_key = serializers.CharField()
    idempotent = serializers.BooleanField()
    state = serializers.CharField()
    external_ref = serializers.CharField()
    result = serializers.SerializerMethodField()
    attempt = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    reconciled_by = serializers.CharField(
        source="reconciled_by.username", allow_null=True, default=None
    )
    reconcile_note = serializers.CharField()
    reconciled_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(OpenApiTypes.ANY)
    def get_result(self, effect: Effect) -> Any:
        return queries.shown(effect.result, self.context["sensitive"])


class DelegationSerializer(serializers.Serializer):
    user = serializers.CharField()
    delegation = serializers.ChoiceField(choices=sorted(access.DELEGATIONS))


class CancelIntentSerializer(serializers.Serializer):
    requested_at = serializers.DateTimeField(source="cancel_requested_at")
    requested_by = serializers.CharField(
        source="cancel_requested_by.username", allow_null=True, default=None
    )
    reason = serializers.CharField(source="cancel_reason")


class TaskDetailSerializer(TaskSummarySerializer):
    """Everything about one task the caller may see."""

    # Renders a Task; context: ``viewer`` (the user) and ``detail`` (queries.task_detail).

    argument_digest = serializers.CharField()
    server_build = serializers.CharField()
    policy_revision = serializers.CharField()
    token_id = serializers.IntegerField(allow_null=True)
    ttl_ms = serializers.IntegerField(allow_null=True)
    poll_interval_ms = serializers.IntegerField()
    attempt = serializers.IntegerField()
    client_capabilities = serializers.DictField()
    cancel = serializers.SerializerMethodField()
    arguments = serializers.SerializerMethodField(
        help_text="The arguments, redacted (sensitive names, values and the tool's own list)."
    )
    input_requests = serializers.SerializerMethodField()
    effects = serializers.SerializerMethodField()
    delegations = serializers.SerializerMethodField()
    timeline = serializers.SerializerMethodField(
        help_text=f"The task's audit events, oldest first (the last {queries.TIMELINE_LIMIT})."
    )
    timeline_truncated = serializers.SerializerMethodField()
    task = serializers.SerializerMethodField()

    @property
    def detail(self) -> queries.TaskDetail:
        return self.context["detail"]  # type: ignore[no-any-return]

    @extend_schema_field(CancelIntentSerializer(allow_null=True))
    def get_cancel(self, task: Task) -> dict[str, Any] | None:
        if task.cancel_requested_at is None:
            return None
        return dict(CancelIntentSerializer(task).data)

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_arguments(self, task: Task) -> Any:
        return self.detail.arguments

    @extend_schema_field(InputRequestSerializer(many=True))
    def get_input_requests(self, task: Task) -> list[Any]:
        return list(InputRequestSerializer(self.detail.inputs, many=True).data)

    @extend_schema_field(EffectSerializer(many=True))
    def get_effects(self, task: Task) -> list[Any]:
        sensitive = queries.sensitive_keys_of(task.tool_name)
        return list(
            EffectSerializer(self.detail.effects, many=True, context={"sensitive": sensitive}).data
        )

    @extend_schema_field(DelegationSerializer(many=True))
    def get_delegations(self, task: Task) -> list[dict[str, str]]:
        pairs = sorted((user.get_username(), name) for user, name in self.detail.delegations)
        return [{"user": username, "delegation": name} for username, name in pairs]

    @extend_schema_field(AuditEventSerializer(many=True))
    def get_timeline(self, task: Task) -> list[Any]:
        rendered: Any = AuditEventSerializer(self.detail.timeline, many=True).data
        return list(rendered)

    def get_timeline_truncated(self, task: Task) -> bool:
        return self.detail.timeline_truncated

    @extend_schema_field(DetailedTaskSerializer)
    def get_task(self, task: Task) -> dict[str, Any]:
        return detailed_for(self.context["viewer"], task)


# ---------------------------------------------------------------- tasks: input
class AnswerInputSerializer(serializers.Serializer):
    """The answer to one input request: an ``ElicitResult`` (``action`` and ``content``), a
    ``CreateMessageResult`` or a ``ListRootsResult``, as the request's method asks."""

    response = serializers.DictField(
        help_text='e.g. {"action": "accept", "content": {"approve": true}}'
    )


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class ForceCancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, help_text="Why the task is ended (audited).")


class ReconcileSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(
        choices=RECONCILE_DECISIONS,
        help_text="applied: the step continues with that outcome; not_applied: the step runs "
        "again; fail: the task fails.",
    )
    reason = serializers.CharField(max_length=2000, help_text="Why (audited).")
    external_ref = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=500,
        default="",
        help_text="The downstream reference of what was applied (required for applied).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["decision"] == "applied" and not attrs["external_ref"].strip():
            raise serializers.ValidationError(
                {"external_ref": "An applied decision needs the external reference."}
            )
        return attrs


class DelegationInputSerializer(serializers.Serializer):
    user = serializers.CharField(max_length=150, help_text="The username of the grantee.")
    delegation = serializers.ChoiceField(
        choices=sorted(access.DELEGATIONS), help_text="view, or answer (which includes view)."
    )


# ---------------------------------------------------------------- tokens
class TokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    prefix = serializers.SerializerMethodField(help_text="The public part of the token.")
    name = serializers.CharField()
    tenant = serializers.CharField(source="tenant.slug")
    user = serializers.CharField(source="user.username")
    scopes = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    active = serializers.SerializerMethodField()

    def get_prefix(self, token: Any) -> str:
        return f"mcpt_{token.lookup}_"

    def get_active(self, token: Any) -> bool:
        return bool(token.is_active())


class IssuedTokenSerializer(TokenSerializer):
    secret = serializers.CharField(help_text="The bearer token. Shown once, never again.")


ISSUABLE_SCOPES = ("mcp", "mcp:tasks", "mcp:tools", "api")


class TokenIssueSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, allow_blank=True, max_length=100, default="")
    tenant = serializers.SlugField(
        required=False, max_length=64, help_text="Defaults to the caller's tenant."
    )
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=ISSUABLE_SCOPES),
        required=False,
        default=["mcp"],
        max_length=len(ISSUABLE_SCOPES),
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_expires_at(self, value: Any) -> Any:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("must be in the future")
        return value

    def validate_scopes(self, value: list[str]) -> list[str]:
        if not value:
            raise serializers.ValidationError("at least one scope")
        return sorted(set(value))


class TokenRevokeSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=500, default="", help_text="Why (audited)."
    )
