"""Append-only, hash-chained audit events.

Fields of :class:`AuditEvent`:

- ``chain``: ``tenant:<slug>`` for tenant events, ``system`` for events with no tenant.
- ``seq``: position in the chain, 1-based, gap-free; null until the event is sealed.
- ``created_at``: when the event was recorded (UTC).
- ``tenant_id``: the tenant, as a plain column (null on the system chain).
- ``actor_kind``: ``principal`` (an MCP token), ``user`` (dashboard / API), ``operator``,
  ``system`` (workers, sweepers).
- ``actor_id`` / ``actor_display``: user id and a display name.
- ``action``: dotted verb, e.g. ``task.created``, ``task.cancel_requested``.
- ``task_id``: a plain column, never a foreign key: audit outlives tasks.
- ``data``: the redacted, size-capped payload.
- ``request_id``: the id of the request that caused the event, when there was one.
- ``prev_hash`` / ``hash``: SHA-256 chain, ``hash = sha256(prev_hash || jcs(event))``.

With ``MCPTASKS_AUDIT_SEAL_DELAY_MS`` > 0 an event is inserted *unsealed* (``seq``,
``prev_hash`` and ``hash`` null) in its transaction and sealed after commit by
:mod:`audit.seal`; otherwise it is sealed as it is inserted. The seal is the one UPDATE a row
ever gets (null to values, nothing else changed); rows are deleted only by retention
(:mod:`audit.retention`), which leaves a :class:`RetentionCheckpoint`. On PostgreSQL a trigger
enforces all three (migrations 0003, 0006).

On PostgreSQL the table is partitioned by month of ``created_at`` (migration 0008,
:mod:`audit.partitions`): there the primary key is ``(id, created_at)`` and ``(chain, seq)`` is
unique per partition, with a trigger and the seal function refusing a ``seq`` another partition
holds; Django's state below (``id`` the primary key, one unique constraint) is SQLite's table.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from mcptasks.task_ids import TaskIdField


class ChainHead(models.Model):
    """One row per chain: its last sealed event. Locked by the sealer (:mod:`audit.seal`), or,
    when events are sealed inline, last in every writing transaction."""

    chain = models.CharField(max_length=80, primary_key=True)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="0" * 64)
    updated_at = models.DateTimeField(default=timezone.now)


class AuditEvent(models.Model):
    chain = models.CharField(max_length=80)
    seq = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    tenant_id = models.BigIntegerField(null=True, blank=True)
    actor_kind = models.CharField(max_length=16)
    actor_id = models.CharField(max_length=64, blank=True, default="")
    actor_display = models.CharField(max_length=200, blank=True, default="")
    action = models.CharField(max_length=64)
    task_id = TaskIdField(max_length=64, blank=True, default="", db_index=True)
    data = models.JSONField(default=dict)
    request_id = models.CharField(max_length=64, blank=True, default="")
    prev_hash = models.CharField(max_length=64, null=True, blank=True)
    hash = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "seq"], name="audit_chain_seq_unique")
        ]
        indexes = [
            # The sealer's work list (audit/seal.py): a chain's unsealed events in id order.
            models.Index(
                fields=["chain", "id"],
                name="audit_unsealed",
                condition=models.Q(seq__isnull=True),
            ),
            models.Index(fields=["tenant_id", "-created_at"], name="audit_tenant_created"),
            models.Index(fields=["action", "-created_at"], name="audit_action_created"),
        ]

    def __str__(self) -> str:
        where = f"#{self.seq}" if self.seq is not None else " (sealing)"
        return f"{self.chain}{where} {self.action}"


class RetentionCheckpoint(models.Model):
    """Where a chain starts after retention purged its oldest events (one row per purge).

    Fields: ``chain``; ``seq`` and ``hash``, the sequence and hash of the last purged event (the
    next surviving event's ``prev_hash``); ``purged`` (how many events this purge deleted);
    ``cutoff`` (events older than this were eligible); ``created_at``. Verification starts from
    the checkpoint with the highest ``seq``; the ``audit.purged`` event recorded in the same
    transaction repeats ``seq`` and ``hash``, so the checkpoint is itself covered by the chain.
    Append-only like the events (the PostgreSQL trigger refuses UPDATE and DELETE).
    """

    chain = models.CharField(max_length=80)
    seq = models.BigIntegerField()
    hash = models.CharField(max_length=64)
    purged = models.BigIntegerField(default=0)
    cutoff = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "seq"], name="audit_checkpoint_chain_seq")
        ]

    def __str__(self) -> str:
        return f"{self.chain} checkpoint at #{self.seq}"


class RetentionPolicy(models.Model):
    """How long a tenant keeps its audit events: ``keep_days`` (≥ 1) days.

    Tenants without a policy keep everything. Applied by :func:`audit.retention.purge_due`
    and ``manage.py purge_audit --tenant SLUG`` (which falls back to it without
    ``--older-than-days``).
    """

    tenant = models.OneToOneField(
        "mcptasks.Tenant", on_delete=models.CASCADE, related_name="audit_retention"
    )
    keep_days = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(keep_days__gte=1), name="audit_retention_keep_days_positive"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant} keeps audit for {self.keep_days} days"


class AuditDigest(models.Model):
    """The index of a signed digest file (:mod:`audit.digests`); the *file* is the anchor.

    Fields: ``chain``; ``number`` (1-based position in the chain's sequence of digests, unique
    per chain so two writers cannot fork it); ``name`` (the file's name in the digest storage);
    ``sha256`` (of the file's bytes, which the next digest repeats); ``head_seq`` /
    ``head_hash`` (the chain head the digest attests); ``created_at``. Verification reads the
    files and uses these rows only to notice a file that went missing.
    """

    chain = models.CharField(max_length=80)
    number = models.PositiveIntegerField()
    name = models.CharField(max_length=255)
    sha256 = models.CharField(max_length=64)
    head_seq = models.BigIntegerField()
    head_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "number"], name="audit_digest_chain_number")
        ]

    def __str__(self) -> str:
        return f"{self.chain} digest #{self.number} at seq {self.head_seq}"


class LegalHold(models.Model):
    """A legal hold (:mod:`audit.holds`): while active (``released_at`` null) it stops audit
    retention and TTL deletion of what it covers — a whole tenant (``task_id`` empty) or one
    task of it. Placing and releasing are audited (``legal_hold.placed`` / ``.released``) with
    who and why; rows are kept after release.
    """

    tenant = models.ForeignKey("mcptasks.Tenant", on_delete=models.PROTECT, related_name="+")
    task_id = TaskIdField(max_length=64, blank=True, default="", db_index=True)
    reason = models.TextField()
    placed_by = models.CharField(max_length=200)
    placed_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)
    released_by = models.CharField(max_length=200, blank=True, default="")
    release_reason = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        scope = f"task {self.task_id}" if self.task_id else "the whole tenant"
        return f"legal hold #{self.pk} on {scope} of {self.tenant}"
