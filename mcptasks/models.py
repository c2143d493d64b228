"""The durable task core: tenants, memberships, API tokens, tasks, input requests, effects.

Rows here are written through ``mcptasks.lifecycle`` only (task state) and the token helpers below;
``save()`` carries no logic (STYLE anti-patterns).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone
from guardian.models import GroupObjectPermissionBase, UserObjectPermissionBase

from mcptasks import db_retry, inputs


def new_task_id() -> str:
    """A 192-bit url-safe random id (DESIGN §3: ≥128 bits from `secrets`)."""
    return secrets.token_urlsafe(24)


class Tenant(models.Model):
    slug = models.SlugField(unique=True, max_length=64)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    # Fair share (mcptasks/fairshare.py): caps on this tenant's *running* tasks; empty = the
    # MCPTASKS_MAX_RUNNING_TASKS_PER_* setting, 0 = no cap.
    max_running_tasks = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Running tasks of this tenant at once (empty: the server's setting; 0: no cap)",
    )
    max_running_tasks_per_principal = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Running tasks of one principal of this tenant at once (empty: the setting)",
    )

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    MEMBER = "member"
    ADMIN = "admin"
    OPERATOR = "operator"
    AUDITOR = "auditor"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant", "role"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role}@{self.tenant}"


TOKEN_PREFIX = "mcpt"


def scope_covers(held: list[str], scope: str) -> bool:
    """Scopes are hierarchical: ``mcp`` covers ``mcp:tasks`` and ``mcp:tools``."""
    return any(scope == item or scope.startswith(item + ":") for item in held)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiToken(models.Model):
    """The MCP principal: a bearer token ``mcpt_<lookup>_<secret>``.

    Only the lookup prefix and the SHA-256 of the 256-bit secret are stored; the plaintext is
    returned once by :meth:`issue`. SHA-256 rather than a password hasher: the secret is random,
    so a slow hash adds nothing but hundreds of ms per request.
    """

    lookup = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    name = models.CharField(max_length=100, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Who issued it (an admin or operator may issue a token owned by someone else): that person
    # counts as a requester of the tasks it creates (access.requesters). The owner when nobody
    # else is named (a command, a user's own token); None for tokens issued before 0004.
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    DEFAULT_SCOPES = ("mcp",)

    def __str__(self) -> str:
        return f"{TOKEN_PREFIX}_{self.lookup}_… ({self.user})"

    @classmethod
    def issue(
        cls,
        *,
        user: models.Model,
        tenant: Tenant,
        name: str = "",
        scopes: list[str] | None = None,
        expires_at: datetime | None = None,
        issued_by: models.Model | None = None,
    ) -> tuple[ApiToken, str]:
        """Create a token; return it and the plaintext, which is never stored or shown again.
        ``issued_by`` is the person who issued it (default: its owner)."""
        lookup = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        token = cls.objects.create(
            lookup=lookup,
            secret_hash=hash_secret(secret),
            name=name,
            user=user,
            tenant=tenant,
            scopes=list(scopes if scopes is not None else cls.DEFAULT_SCOPES),
            expires_at=expires_at,
            issued_by=issued_by if issued_by is not None else user,
        )
        return token, f"{TOKEN_PREFIX}_{lookup}_{secret}"

    @staticmethod
    def split(plaintext: str) -> tuple[str, str] | None:
        parts = plaintext.split("_", 2)
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
            return None
        if not inputs.storable(plaintext):
            return None  # a NUL or a lone surrogate: no token's, and no query may hold it
        return parts[1], parts[2]

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.secret_hash, hash_secret(secret))

    def is_active(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > now

    def has_scope(self, scope: str) -> bool:
        return scope_covers(self.scopes, scope)

    def touch_due(self, now: datetime) -> bool:
        """Is this use to be recorded (none recorded within the interval)?"""
        interval = timedelta(seconds=settings.MCPTASKS_TOKEN_LAST_USED_INTERVAL_S)
        return self.last_used_at is None or now - self.last_used_at >= interval

    def touch(self, now: datetime | None = None) -> None:
        """Record use at most once per interval: one conditional UPDATE, never on every request."""
        now = now or timezone.now()
        if not self.touch_due(now):
            return
        interval = timedelta(seconds=settings.MCPTASKS_TOKEN_LAST_USED_INTERVAL_S)
        with db_retry.repeatable():  # a request repeated after a lost connection may touch again
            ApiToken.objects.filter(pk=self.pk).filter(
                models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=now - interval)
            ).update(last_used_at=now)
        self.last_used_at = now


class TaskState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SLEEPING = "sleeping"
    AWAITING_INPUT = "awaiting_input"
    AWAITING_OPERATOR = "awaiting_operator"
    NEEDS_RECONCILIATION = "needs_reconciliation"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED})
ACTIVE_STATES = frozenset(set(TaskState) - TERMINAL_STATES)


class Task(models.Model):
    id = models.CharField(primary_key=True, max_length=64, default=new_task_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="tasks")
    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tasks"
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks"
    )
    tool_name = models.CharField(max_length=128)
    arguments = models.JSONField(default=dict)
    argument_digest = models.CharField(max_length=64)
    server_build = models.CharField(max_length=100)
    policy_revision = models.CharField(max_length=64)
    backend_job_id = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=24, choices=TaskState.choices, default=TaskState.QUEUED)
    status_message = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    ttl_ms = models.BigIntegerField(null=True, blank=True)
    poll_interval_ms = models.IntegerField(default=1000)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    cancel_reason = models.TextField(blank=True, default="")
    lease_owner = models.CharField(max_length=100, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempt = models.IntegerField(default=0)  # fencing token: bumped by every claim
    # Attempts lost with their worker (lease expired, re-queued by the reaper): the limit
    # MCPTASKS_MAX_ATTEMPTS counts these, not resumes after a timer or an answer.
    lost_attempts = models.IntegerField(default=0)
    version = models.IntegerField(default=1)  # bumped by every visible change
    wake_at = models.DateTimeField(null=True, blank=True)
    client_capabilities = models.JSONField(default=dict)
    # Idempotency of creation: the MRTR requestState nonce or a client idempotency key.
    creation_key = models.CharField(max_length=128, null=True, blank=True)
    # The step keys of the first run, in order: a replay that diverges fails the task.
    step_log = models.JSONField(default=list)
    # What a completed task came to beyond its wire status: "rejected" when an approval gate of
    # it was rejected (the wire still says completed; the dashboard, filters and audit say so).
    outcome = models.CharField(max_length=16, blank=True, default="")
    # What the dashboard's search reads (mcptasks/search.py): redacted, lower-cased text, each
    # with a trigram index on PostgreSQL (migration 0004).
    search_summary = models.TextField(blank=True, default="", editable=False)
    search_status = models.TextField(blank=True, default="", editable=False)
    # Failures that explain themselves (mcptasks/failures.py): the id in every log line of the
    # task (web and worker), what a failed run raised and in which step, and the task a retry
    # started from.
    correlation_id = models.CharField(max_length=64, blank=True, default="")
    # The W3C traceparent of the task's creation span (mcptasks/tracing.py): every worker run
    # joins that trace, whoever delivered it. Empty when tracing was off.
    traceparent = models.CharField(max_length=64, blank=True, default="")
    failure = models.JSONField(null=True, blank=True)
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries"
    )

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="task_tenant_created"),
            models.Index(fields=["tenant", "-updated_at"], name="task_tenant_updated"),
            models.Index(fields=["principal", "-created_at"], name="task_principal_created"),
            models.Index(fields=["state", "wake_at"], name="task_state_wake"),
            models.Index(fields=["state", "lease_expires_at"], name="task_state_lease"),
            models.Index(fields=["state", "expires_at"], name="task_state_expires"),
            models.Index(fields=["backend_job_id"], name="task_backend_job"),
            # The dashboard's state and tool filters, in created order: their pages and their
            # (capped) counts read the matching rows only, at any table size (B4).
            models.Index(
                fields=["tenant", "state", "-created_at"], name="task_tenant_state_created"
            ),
            models.Index(
                fields=["tenant", "tool_name", "-created_at"], name="task_tenant_tool_created"
            ),
            # The active-task limits count only these rows at every creation.
            models.Index(
                fields=["principal"],
                name="task_active_principal",
                condition=models.Q(state__in=sorted(ACTIVE_STATES)),
            ),
            models.Index(
                fields=["tenant"],
                name="task_active_tenant",
                condition=models.Q(state__in=sorted(ACTIVE_STATES)),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["principal", "creation_key"],
                condition=models.Q(creation_key__isnull=False),
                name="task_creation_key_unique",
            )
        ]
        permissions = [("answer_task", "May answer the task's operator input requests")]

    def __str__(self) -> str:
        return f"{self.tool_name}:{self.id[:8]} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def trace_id(self) -> str:
        """The OpenTelemetry trace id of the task ("" when it was created with tracing off)."""
        from mcptasks.tracing import trace_id_of

        return trace_id_of(self.traceparent)


class TaskUserObjectPermission(UserObjectPermissionBase):
    """Per-task delegations (django-guardian, direct foreign key). Used only by access.py."""

    content_object = models.ForeignKey(Task, on_delete=models.CASCADE)


class TaskGroupObjectPermission(GroupObjectPermissionBase):
    content_object = models.ForeignKey(Task, on_delete=models.CASCADE)


class TaskStep(models.Model):
    """A recorded replay step (now, uuid, sleep, job…): its outcome is returned on replay."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="steps")
    key = models.CharField(max_length=200)
    kind = models.CharField(max_length=32)
    value = models.JSONField(null=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "key"], name="step_unique_key")]


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


class EffectState(models.TextChoices):
    INTENDED = "intended"
    APPLIED = "applied"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RECONCILED_APPLIED = "reconciled_applied"
    RECONCILED_NOT_APPLIED = "reconciled_not_applied"


class Effect(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="effects")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    step = models.CharField(max_length=200)
    idempotency_key = models.CharField(max_length=200)
    idempotent = models.BooleanField(default=False)
    state = models.CharField(max_length=32, choices=EffectState.choices)
    external_ref = models.CharField(max_length=500, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    attempt = models.IntegerField(default=0)
    # When the lease of the attempt that left the effect unconfirmed ran (or runs) out: until
    # then plus MCPTASKS_RECONCILE_MARGIN_S that attempt may still be alive and call downstream,
    # so "not applied" cannot be recorded. Set when the attempt loses the task.
    holder_lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    reconciled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reconcile_note = models.TextField(blank=True, default="")
    reconciled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "step"], name="effect_unique_step")]
        indexes = [models.Index(fields=["tenant", "state"], name="effect_tenant_state")]

    @property
    def not_applied_from(self) -> datetime | None:
        """When "not applied" may be recorded: the attempt that left the effect is presumed
        dead (its lease ran out MCPTASKS_RECONCILE_MARGIN_S ago). None: it may be now."""
        if self.holder_lease_expires_at is None:
            return None
        return self.holder_lease_expires_at + timedelta(
            seconds=settings.MCPTASKS_RECONCILE_MARGIN_S
        )

    @property
    def not_applied_refused(self) -> bool:
        """Is "not applied" still refused (the attempt that left it may be alive)?"""
        after = self.not_applied_from
        return after is not None and after > timezone.now()


class Heartbeat(models.Model):
    """The last sign of life of a process or a periodic job, kept in the database (the truth
    when the broker is down): ``worker:<hostname>`` rows of Celery workers, ``sweep`` of the
    last sweep run (mcptasks/keeper.py)."""

    name = models.CharField(max_length=200, primary_key=True)
    seen_at = models.DateTimeField()
    data = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return self.name


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


# The outbox (issue 24): destinations of a tenant's events and deliveries to them.
from mcptasks.outbox.models import Delivery, DeliveryState, Destination  # noqa: E402, F401
