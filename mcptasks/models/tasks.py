"""Tasks: the durable task row, its creation keys, its replay steps and its per-task
delegations.

Task state is written through ``mcptasks.lifecycle`` only; ``save()`` carries no logic.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone
from guardian.models import GroupObjectPermissionBase, UserObjectPermissionBase

from mcptasks.models.principals import ApiToken, Tenant
from mcptasks.task_ids import PREFIX, TaskIdField, distinctive, id_tail, new_task_id


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


def terminal_grace() -> timedelta:
    """How long a terminal task is kept past its TTL (``MCPTASKS_TERMINAL_GRACE_S``)."""
    return timedelta(seconds=settings.MCPTASKS_TERMINAL_GRACE_S)


class Task(models.Model):
    # Migration 0018 dropped the LIKE index Django gives a text key (the "C" collation lets the
    # key serve a prefix); Django's state cannot say so, and a migration altering this field
    # would try to drop that index by name: drop it with IF EXISTS there.
    id = TaskIdField(primary_key=True, max_length=64, default=new_task_id, editable=False)
    # No index of their own: task_tenant_created and task_principal_created lead with them
    # (every index is one more entry per creation and one more for the planner to weigh in
    # each day partition; migration 0018).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="tasks", db_index=False
    )
    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tasks", db_index=False
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
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="retries",
        db_index=False,  # task_retry_of: a plain index, without the LIKE one a key gets
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
            models.Index(fields=["retry_of"], name="task_retry_of"),
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
            # The dashboard's search by what its pages show of an id: the part after the day
            # prefix (mcptasks/task_partitions.py id_search), for day-prefixed ids only.
            models.Index(id_tail(), name="task_id_tail", condition=models.Q(id__gte=PREFIX)),
            # The operations page's oldest queued task: one index entry, not a sort of the
            # whole backlog (B4 at 1,000,000 tasks).
            models.Index(
                fields=["updated_at"],
                name="task_queued_updated",
                condition=models.Q(state="queued"),
            ),
        ]
        permissions = [("answer_task", "May answer the task's operator input requests")]

    def __str__(self) -> str:
        return f"{self.tool_name}:{distinctive(self.id)[:8]} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def token_issuer_id(self) -> int | None:
        """Who issued the token that created the task (None: no token, or its issuer unknown):
        read from the token when it is loaded, else one query."""
        if self.token_id is None:
            return None
        if Task.token.is_cached(self):
            return self.token.issued_by_id  # type: ignore[union-attr]
        return (
            ApiToken.objects.filter(pk=self.token_id).values_list("issued_by_id", flat=True).first()
        )

    @property
    def trace_id(self) -> str:
        """The OpenTelemetry trace id of the task ("" when it was created with tracing off)."""
        from mcptasks.tracing import trace_id_of

        return trace_id_of(self.traceparent)


class TaskCreationKey(models.Model):
    """The idempotency of a task's creation: the MRTR requestState nonce (``mrtr:…``) or a
    client idempotency key (``idem:…``), one task per principal and key
    (``lifecycle.task_create``). A table of its own because the task table is partitioned by
    ``id`` on PostgreSQL, and a partitioned table cannot hold a unique constraint that leaves
    out its partition key."""

    principal = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    key = models.CharField(max_length=128)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="creation_keys")
    # The task's creation: the key is honoured for MCPTASKS_IDEMPOTENCY_WINDOW_S after it.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["principal", "key"], name="task_creation_key_unique")
        ]

    def __str__(self) -> str:
        return f"{self.key} -> {self.task_id}"


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
