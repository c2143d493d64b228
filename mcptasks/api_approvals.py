"""REST API for approval gates (issue 21): ``/api/v1/approvals`` lists the pending gates the
caller may decide on; ``POST /api/v1/approvals/{task_id}/{key}/decisions`` records the caller's
approve or reject. Eligibility is access.may_decide's (a 403 with its reason, the same as the
dashboard and MCP ``tasks/update`` give); the decision is lifecycle's."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from mcptasks import access, lifecycle, wire
from mcptasks.api import ApiView, Conflict, _sentence, actor_of, parse, problems, visible_task
from mcptasks.models import InputKind, InputRequest, InputState, Task

LIST_LIMIT = 100


class DecisionInputSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["approve", "reject"])
    comment = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, default="", trim_whitespace=True
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["verdict"] == "reject" and not attrs.get("comment"):
            raise serializers.ValidationError({"comment": ["A reject needs a comment saying why."]})
        return attrs


class DecisionSerializer(serializers.Serializer):
    reviewer = serializers.CharField(source="reviewer.username")
    verdict = serializers.CharField()
    comment = serializers.CharField()
    via = serializers.CharField()
    created_at = serializers.DateTimeField()


class GateSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    tool = serializers.CharField(source="task.tool_name")
    requester = serializers.CharField(source="task.principal.username")
    key = serializers.CharField()
    message = serializers.SerializerMethodField()
    state = serializers.CharField()
    outcome = serializers.CharField()
    summary = serializers.SerializerMethodField()
    policy = serializers.SerializerMethodField()
    approvals = serializers.SerializerMethodField()
    decisions = DecisionSerializer(many=True, source="decisions.all")
    deadline_at = serializers.DateTimeField(allow_null=True)

    def get_message(self, gate: InputRequest) -> str:
        return str((gate.params or {}).get("message", ""))

    def get_summary(self, gate: InputRequest) -> Any:
        sensitive = wire.sensitive_keys_of(gate.task.tool_name)
        return wire.shown((gate.gate or {}).get("summary") or {}, sensitive)

    def get_policy(self, gate: InputRequest) -> dict[str, Any]:
        return access.gate_policy(gate)

    def get_approvals(self, gate: InputRequest) -> int:
        return sum(1 for d in gate.decisions.all() if d.verdict == "approve")


def _gates() -> Any:
    return InputRequest.objects.filter(kind=InputKind.APPROVAL).select_related(
        "task", "task__tenant", "task__principal"
    )


class ApprovalListView(ApiView):
    @extend_schema(
        operation_id="approvals_list",
        tags=["approvals"],
        summary="Approval gates awaiting my decision",
        description="Pending approval gates the caller may approve or reject now (eligible "
        "under the gate's policy; never their own request), oldest first, at most 100.",
        responses={200: GateSerializer(many=True), **problems()},
    )
    def get(self, request: Request) -> Response:
        user = request.user
        pending = (
            _gates()
            .filter(state=InputState.PENDING, tenant_id__in=access.member_tenant_ids(user))
            .prefetch_related("decisions__reviewer")
            .order_by("created_at", "id")
        )
        mine = [g for g in pending[: LIST_LIMIT * 5] if access.may_decide(user, g, g.task)]
        return Response(GateSerializer(mine[:LIST_LIMIT], many=True).data)


class ApprovalDecisionView(ApiView):
    @extend_schema(
        operation_id="approvals_decide",
        tags=["approvals"],
        summary="Approve or reject an approval gate",
        description="Records the caller's decision (a comment is required to reject). The gate "
        "opens at the policy's required approvals and closes at the first reject. 403 with the "
        "reason when the caller may not decide (the requester, the token's issuer, an auditor, "
        "not eligible under the policy, expired); 409 when the caller decided already or the "
        "gate is closed. Recorded with via=api and audited.",
        request=DecisionInputSerializer,
        responses={200: GateSerializer, **problems(403, 404, 409, 422)},
    )
    def post(self, request: Request, task_id: str, key: str) -> Response:
        task: Task = visible_task(request, task_id)
        gate = _gates().filter(task=task, key=key).first()
        if gate is None:
            raise NotFound(f"Approval gate {key!r} not found on this task.")
        decision = access.may_decide(request.user, gate, task)
        if not decision:
            raise PermissionDenied(_sentence(decision.reason))
        data = parse(DecisionInputSerializer, request)
        try:
            lifecycle.task_decide_approval(
                task_id=task.pk,
                key=key,
                reviewer=request.user,
                verdict=data["verdict"],
                comment=data["comment"],
                actor=actor_of(request, task),
                via="api",
            )
        except lifecycle.DecisionRefused as exc:
            raise Conflict(_sentence(str(exc))) from None
        gate = _gates().prefetch_related("decisions__reviewer").get(pk=gate.pk)
        return Response(GateSerializer(gate).data)
