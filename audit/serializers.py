"""Input and output serializers of the audit REST API (audit.api), and the audit events a
task's detail shows (mcptasks.api.serializers).

Input serializers only parse and validate; output serializers only render. None of them saves:
an export goes through audit.export.
"""

from __future__ import annotations

from rest_framework import serializers


class ActorSerializer(serializers.Serializer):
    kind = serializers.CharField(source="actor_kind")
    id = serializers.CharField(source="actor_id")
    display = serializers.CharField(source="actor_display")


class AuditEventSerializer(serializers.Serializer):
    """An audit event, redacted when recorded, with its hash-chain fields (null while the event
    waits to be sealed, at most the seal delay: audit/seal.py)."""

    id = serializers.IntegerField()
    chain = serializers.CharField()
    seq = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    tenant_id = serializers.IntegerField(allow_null=True)
    actor = ActorSerializer(source="*")
    action = serializers.CharField()
    task_id = serializers.CharField()
    data = serializers.JSONField()  # type: ignore[assignment]  # a field, not Serializer.data
    request_id = serializers.CharField()
    prev_hash = serializers.CharField(allow_null=True)
    hash = serializers.CharField(allow_null=True)


class ExportInputSerializer(serializers.Serializer):
    """What to export. The chain defaults to the caller's tenant."""

    format = serializers.ChoiceField(
        choices=("jsonl", "csv", "ocsf"),
        default="jsonl",
        help_text="jsonl: stored events; csv; ocsf: JSON Lines of OCSF 1.3 events (docs/audit.md)",
    )
    tenant = serializers.SlugField(
        required=False, max_length=64, help_text="Export this tenant's chain."
    )
    chain = serializers.CharField(
        required=False,
        max_length=80,
        help_text='"tenant:<slug>", "system", or "*" for every chain (staff operators).',
    )
    actor = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        default="",
        help_text="A user id or display name.",
    )
    action = serializers.CharField(required=False, allow_blank=True, max_length=64, default="")
    task_id = serializers.CharField(required=False, allow_blank=True, max_length=64, default="")
    since = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Inclusive."
    )
    until = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Exclusive."
    )


class ExportSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="A signed handle of this export; it expires.")
    format = serializers.CharField()
    count = serializers.IntegerField()
    content_sha256 = serializers.CharField()
    file = serializers.CharField(help_text="Where to download the file.")
    manifest_url = serializers.CharField(help_text="Where to download the signed manifest.")
    manifest = serializers.DictField(help_text="The signed manifest (Ed25519).")
