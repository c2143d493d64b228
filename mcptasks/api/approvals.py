"""REST API for approval gates (issue 21): ``/api/v1/approvals`` lists the pending gates the
caller may decide on; ``POST /api/v1/approvals/{task_id}/{key}/decisions`` records the caller's
approve or reject. Eligibility is access.may_decide's (a 403 with its reason, the same as the
dashboard and MCP ``tasks/update`` give); the decision is lifecycle's."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from mcptasks import access, approval_policies, lifecycle, wire
from mcptasks.api.views import visible_task
from mcptasks.models import (
    ApprovalPolicyRule,
    InputKind,
    InputRequest,
    InputState,
    ReviewerGroup,
    Task,
)
from mcptasks.restkit.errors import Conflict, problems, sentence
from mcptasks.restkit.views import ApiView, TenantAdminView, actor_of

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
        masked = access.gate_policy(gate).get("redact") or ()
        sensitive = wire.sensitive_keys_of(gate.task.tool_name) | frozenset(masked)
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


class ApprovalDecisionView(TenantAdminView):
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
        responses={200: GateSerializer, **problems(400, 403, 404, 409, 422)},
    )
    def post(self, request: Request, task_id: str, key: str) -> Response:
        # A reviewer the gate's policy names reaches it even without seeing the task (access).
        reviewed = access.gate_for_reviewer(request.user, task_id, key)
        task: Task = reviewed[0] if reviewed is not None else visible_task(request, task_id)
        gate = _gates().filter(task=task, key=key).first()
        if gate is None:
            raise NotFound(f"Approval gate {key!r} not found on this task.")
        self.require(access.may_decide(request.user, gate, task))
        data = self.body(DecisionInputSerializer)
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
            raise Conflict(sentence(str(exc))) from None
        gate = _gates().prefetch_related("decisions__reviewer").get(pk=gate.pk)
        return Response(GateSerializer(gate).data)


# ---------------------------------------------------------------- stored policies
class PolicyRuleSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    tenant = serializers.SlugField(required=False, help_text="default: the caller's tenant")
    tool = serializers.CharField(source="tool_name", max_length=128)
    key = serializers.CharField(max_length=200, default="approval")
    argument = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
    value = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    required_approvals = serializers.IntegerField(
        source="required", min_value=1, max_value=20, default=1
    )
    roles = serializers.ListField(
        child=serializers.ChoiceField(choices=["member", "admin", "operator"]), default=list
    )
    groups = serializers.ListField(child=serializers.SlugField(max_length=64), default=list)
    users = serializers.ListField(child=serializers.CharField(max_length=150), default=list)
    redact = serializers.ListField(
        child=serializers.CharField(max_length=128),
        default=list,
        max_length=50,
        help_text="argument fields the approval page masks (added to the tool's own)",
    )
    version = serializers.IntegerField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("argument")) != bool(attrs.get("value")):
            raise serializers.ValidationError(
                {"value": ["argument and value are given together (or neither)."]}
            )
        if not (attrs.get("roles") or attrs.get("groups") or attrs.get("users")):
            raise serializers.ValidationError(
                {"roles": ["Name at least one role, reviewer group or user."]}
            )
        return attrs


def _rule_data(rule: ApprovalPolicyRule) -> dict[str, Any]:
    return {**PolicyRuleSerializer(rule).data, "tenant": rule.tenant.slug}


class ApprovalPolicyListView(TenantAdminView):
    @extend_schema(
        operation_id="approval_policies_list",
        tags=["approvals"],
        summary="Active approval policies",
        description="The active (newest) approval policy rules of the tenants the caller "
        "administers.",
        responses={200: PolicyRuleSerializer(many=True), **problems()},
    )
    def get(self, request: Request) -> Response:
        managed = [
            t
            for t in access.member_tenant_ids(request.user)
            if access.may_manage_approvals(request.user, t)
        ]
        rules = ApprovalPolicyRule.objects.filter(tenant_id__in=managed, active=True)
        return Response([_rule_data(r) for r in rules.select_related("tenant").order_by("id")])

    @extend_schema(
        operation_id="approval_policies_save",
        tags=["approvals"],
        summary="Tighten an approval gate's policy",
        description="Stores the next version of the policy for a tool's gate, for every call "
        "or only calls whose `argument` equals `value` (e.g. environment=production). The gate "
        "then needs `required_approvals` (never fewer than the tool's default) from the named "
        "roles, reviewer groups and users. Tenant admins; audited as approval.policy_changed.",
        request=PolicyRuleSerializer,
        responses={201: PolicyRuleSerializer, **problems(400, 403, 404, 422)},
    )
    def post(self, request: Request) -> Response:
        data = self.body(PolicyRuleSerializer)
        tenant = self.tenant(data.get("tenant"), access.may_manage_approvals)
        rule = approval_policies.save_rule(
            tenant=tenant,
            actor=self.actor,
            created_by=request.user,
            tool_name=data["tool_name"],
            key=data["key"],
            argument=data["argument"],
            value=data["value"],
            required=data["required"],
            roles=data["roles"],
            groups=data["groups"],
            users=data["users"],
            redact=data["redact"],
        )
        return Response(_rule_data(rule), status=201)


class ApprovalPolicyDetailView(TenantAdminView):
    @extend_schema(
        operation_id="approval_policies_delete",
        tags=["approvals"],
        summary="Delete an approval policy rule",
        description="Withdraws an active rule: its selector's next version is a tombstone and "
        "gates declared afterwards apply the tool's own policy. Tenant admins; audited as "
        "approval.policy_changed with deleted: true. 404 for a rule that is not active or not "
        "of a tenant the caller belongs to.",
        request=None,
        responses={204: None, **problems(403, 404)},
    )
    def delete(self, request: Request, rule_id: int) -> Response:
        rule = (
            ApprovalPolicyRule.objects.select_related("tenant")
            .filter(pk=rule_id, active=True, tenant_id__in=access.member_tenant_ids(request.user))
            .first()
        )
        if rule is None:
            raise NotFound("Approval policy not found.")
        self.require(access.may_manage_approvals(request.user, rule.tenant_id))
        try:
            approval_policies.delete_rule(
                tenant=rule.tenant,
                actor=self.actor,
                created_by=request.user,
                rule_id=rule.pk,
            )
        except ApprovalPolicyRule.DoesNotExist:
            raise NotFound("Approval policy not found.") from None
        return Response(status=204)


# ---------------------------------------------------------------- reviewer groups
class ReviewerGroupSerializer(serializers.Serializer):
    tenant = serializers.SlugField(required=False, help_text="default: the caller's tenant")
    name = serializers.SlugField(max_length=64)
    members = serializers.ListField(
        child=serializers.CharField(max_length=150), max_length=200, default=list
    )


def _group_data(group: ReviewerGroup) -> dict[str, Any]:
    return {
        "tenant": group.tenant.slug,
        "name": group.name,
        "members": sorted(u.get_username() for u in group.members.all()),
    }


class ReviewerGroupListView(TenantAdminView):
    @extend_schema(
        operation_id="reviewer_groups_list",
        tags=["approvals"],
        summary="Reviewer groups",
        description="The reviewer groups of the tenants the caller administers.",
        responses={200: ReviewerGroupSerializer(many=True), **problems()},
    )
    def get(self, request: Request) -> Response:
        managed = [
            t
            for t in access.member_tenant_ids(request.user)
            if access.may_manage_approvals(request.user, t)
        ]
        groups = ReviewerGroup.objects.filter(tenant_id__in=managed).select_related("tenant")
        return Response([_group_data(g) for g in groups.prefetch_related("members")])

    @extend_schema(
        operation_id="reviewer_groups_save",
        tags=["approvals"],
        summary="Create or replace a reviewer group",
        description="Sets the members (usernames of the tenant's members) of a reviewer group, "
        "creating it if needed. Tenant admins; audited as approval.group_changed.",
        request=ReviewerGroupSerializer,
        responses={200: ReviewerGroupSerializer, **problems(400, 403, 404, 422)},
    )
    def post(self, request: Request) -> Response:
        data = self.body(ReviewerGroupSerializer)
        tenant = self.tenant(data.get("tenant"), access.may_manage_approvals)
        try:
            group = approval_policies.save_group(
                tenant=tenant, actor=self.actor, name=data["name"], members=data["members"]
            )
        except ValueError as exc:
            raise ValidationError({"members": [sentence(str(exc))]}) from None
        return Response(_group_data(group))
