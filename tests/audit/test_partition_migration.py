"""Audit migration 0008 partitions a table that already holds sealed and unsealed events: every
row and id survives, the unsealed ones are sealed after, ids go on from the same sequence, and
verify_audit passes. Run on a database of its own (migrated to 0007 first), in processes of
their own, as ``manage.py migrate`` runs in production."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.scratch_db import run_django, scratch_database

pytestmark = [pytest.mark.pg, pytest.mark.django_db]

BEFORE = """
import json, django; django.setup()
from django.conf import settings
from audit import seal
from audit.models import AuditEvent
from audit.record import Actor, record
from mcptasks.models import Tenant
tenant = Tenant.objects.create(slug="acme", name="Acme")
who = Actor.system("test")
for n in range(4):
    record(action="task.created", actor=who, tenant_id=tenant.pk, tenant_slug="acme", data={"n": n})
record(action="auth.login_failed", actor=who, tenant_id=None, tenant_slug=None)
settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 600_000  # recorded unsealed; no sealer runs here
seal.wake_after_commit = lambda chain: None
for n in range(3):
    record(action="task.updated", actor=who, tenant_id=tenant.pk, tenant_slug="acme", data={"n": n})
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT relkind FROM pg_class WHERE relname = 'audit_auditevent'")
    assert cursor.fetchone()[0] == "r", "not a plain table before 0008"
rows = list(AuditEvent.objects.order_by("id").values_list("id", "chain", "seq", "hash"))
print(json.dumps(rows))
"""

AFTER = """
import io, json, django; django.setup()
from django.core.management import call_command
from audit.models import AuditEvent
from audit.record import Actor, record
from audit.seal import seal_pending
rows = list(AuditEvent.objects.order_by("id").values_list("id", "chain", "seq", "hash"))
sealed = seal_pending()
event = record(action="task.created", actor=Actor.system("test"), tenant_id=None,
               tenant_slug=None)
out = io.StringIO()
call_command("verify_audit", stdout=out)
print(json.dumps({"rows": rows, "sealed": sealed, "new_id": event.pk, "new_seq": event.seq,
                  "verify": out.getvalue()}))
"""


@pytest.fixture
def database() -> Iterator[str]:
    """A database of this test, dropped after; its URL."""
    with scratch_database("m0008") as url:
        yield url


def run(url: str, tmp_path: Path, *args: str, stdin: str = "") -> str:
    return run_django(url, tmp_path, *args, stdin=stdin)


def test_partitioning_keeps_every_sealed_and_unsealed_event_and_verify_passes(
    database: str, tmp_path: Path
) -> None:
    run(database, tmp_path, "manage.py", "migrate", "audit", "0007", "--no-input", "-v0")
    run(database, tmp_path, "manage.py", "migrate", "mcptasks", "--no-input", "-v0")
    before = json.loads(run(database, tmp_path, "-c", BEFORE).strip().splitlines()[-1])
    assert sum(1 for row in before if row[2] is None) == 3  # unsealed
    run(database, tmp_path, "manage.py", "migrate", "--no-input", "-v0")
    after: dict[str, Any] = json.loads(
        run(database, tmp_path, "-c", AFTER).strip().splitlines()[-1]
    )
    assert after["rows"] == before  # every row, id, seq and hash as it was
    assert after["sealed"] == 3
    assert after["new_id"] > max(row[0] for row in before) and after["new_seq"] == 2  # system
    assert "audit chains intact" in after["verify"]
    assert "tenant:acme: 7 events" in after["verify"]
    with psycopg.connect(database.replace("postgres://", "postgresql://")) as conn:
        kinds = conn.execute(
            "SELECT c.relkind FROM pg_class c WHERE c.relname = 'audit_auditevent'"
        ).fetchone()
        parts = [row[0] for row in conn.execute("SELECT name FROM audit_partitions()")]
    assert kinds == ("p",)  # partitioned
    assert parts[0] == "audit_auditevent_legacy" and parts[-1] == "audit_auditevent_default"
    assert len(parts) >= 5  # and the months ahead
