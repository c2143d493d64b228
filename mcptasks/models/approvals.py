"""What a task asks: input requests (forms, approval gates), reviewers' decisions, reviewer
groups and the tenants' approval policies."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from mcptasks.models.principals import Tenant
from mcptasks.models.tasks import Task


class Audience(models.TextChoices):
    CLIENT = "client"
    OPERATOR = "operator"
    ANY = "any"


class InputState(models.TextChoices):
    PENDING = "pending"
    ANSWERED = "answered"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"


class InputKind(models.TextChoices):
    FORM = "form"  # an elicitation, sampling or roots request: answered once, as sent
    APPROVAL = "approval"  # an approval gate (ctx.approve): settled by reviewers' decisions


class GateOutcome(models.TextChoices):
    APPROVED = "approved"
    REJECTED = "rejected"


class InputRequest(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="input_requests")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    # The people behind the task (``access.requesters``), copied from it when the request is
    # made — neither changes over a task's life: its principal, and whoever issued the token
    # that created it (None: no token, or its issuer unknown). Who may answer a request outside
    # MCP and who may not approve their own is then read from the request alone, without
    # joining the task table over its day partitions (issue 23).
    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    token_issuer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    key = models.CharField(max_length=200)
    method = models.CharField(max_length=32)
    params = models.JSONField(default=dict)
    audience = models.CharField(max_length=16, choices=Audience.choices, default=Audience.CLIENT)
    forbid_self_approval = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=InputState.choices, default=InputState.PENDING)
    response = models.JSONField(null=True, blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_via = models.CharField(max_length=16, blank=True, default="")
    answered_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=16, choices=InputKind.choices, default=InputKind.FORM)
    # An approval gate's summary fields and the policy that applies (required approvals, eligible
    # roles / reviewer groups / users), resolved when the gate was declared.
    gate = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=16, choices=GateOutcome.choices, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "key"], name="input_unique_key")]
        indexes = [
            models.Index(fields=["tenant", "audience", "state"], name="input_pending_by_tenant"),
            models.Index(fields=["state", "deadline_at"], name="input_state_deadline"),
        ]


class ReviewerGroup(models.Model):
    """A tenant's named set of reviewers (e.g. ``release-managers``), named by approval policies;
    managed by the tenant's admins (access.may_manage_reviewer_groups)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="reviewer_groups")
    name = models.SlugField(max_length=64)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="reviewer_groups"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="reviewer_group_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.tenant}"


class Verdict(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"


class ApprovalDecision(models.Model):
    """One reviewer's decision on one approval gate: who, when, approve or reject, and why.
    Written by lifecycle.task_decide_approval only; one per reviewer and gate."""

    request = models.ForeignKey(InputRequest, on_delete=models.CASCADE, related_name="decisions")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="approval_decisions")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approval_decisions"
    )
    verdict = models.CharField(max_length=8, choices=Verdict.choices)
    comment = models.TextField(blank=True, default="")
    via = models.CharField(max_length=16)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["request", "reviewer"], name="decision_once")
        ]
        indexes = [models.Index(fields=["task", "created_at"], name="decision_task_created")]


class ApprovalPolicyRule(models.Model):
    """A tenant admin's policy for the approval gate ``key`` of ``tool_name``, for every call
    or (``argument`` set) only the calls whose ``argument`` equals ``value``. Versioned: a change
    is a new row with the next version; only the newest of a selector is active. Written by
    mcptasks.approval_policies only."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approval_rules")
    tool_name = models.CharField(max_length=128)
    key = models.CharField(max_length=200, default="approval")
    argument = models.CharField(max_length=128, blank=True, default="")
    value = models.CharField(max_length=500, blank=True, default="")
    version = models.IntegerField(default=1)
    active = models.BooleanField(default=True)
    required = models.IntegerField(default=1)
    roles = models.JSONField(default=list, blank=True)
    groups = models.JSONField(default=list, blank=True)
    users = models.JSONField(default=list, blank=True)
    # Argument fields the approval page masks (added to those the tool's gate names).
    redact = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "tool_name", "key", "argument", "value", "version"],
                name="approval_rule_version_unique",
            )
        ]
        indexes = [
            models.Index(
                fields=["tenant", "tool_name", "key", "active"], name="approval_rule_lookup"
            )
        ]
