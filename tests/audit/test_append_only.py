"""On PostgreSQL a trigger refuses UPDATE and DELETE of audit rows outside retention."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.chain import verify_chain
from audit.models import AuditEvent, RetentionCheckpoint
from audit.record import Actor
from audit.retention import purge_tenant

pytestmark = [pytest.mark.pg, pytest.mark.django_db]
ACME = "tenant:acme"


def refused(statement: Callable[[], Any]) -> str:
    """Run ``statement`` in a savepoint; return the database's refusal (fail if none)."""
    with pytest.raises(DatabaseError) as caught, transaction.atomic():
        statement()
    return str(caught.value)


def raw(sql: str) -> Callable[[], None]:
    def run() -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)

    return run


def test_update_and_delete_of_audit_events_are_refused(record_events: Callable[..., Any]) -> None:
    record_events(3)
    assert "append-only: UPDATE on audit_auditevent" in refused(
        lambda: AuditEvent.objects.filter(chain=ACME, seq=2).update(action="task.woken")
    )
    assert "append-only: DELETE on audit_auditevent" in refused(
        lambda: AuditEvent.objects.filter(chain=ACME, seq=3).delete()
    )
    assert "append-only" in refused(raw("UPDATE audit_auditevent SET data = '{}'"))
    assert "append-only" in refused(raw("DELETE FROM audit_auditevent"))
    assert AuditEvent.objects.filter(chain=ACME).count() == 3
    assert verify_chain(ACME).ok


def test_retention_setting_allows_delete_but_never_update(
    record_events: Callable[..., Any],
) -> None:
    record_events(2)

    def update_with_setting() -> None:
        raw("SET LOCAL mcptasks.audit_retention = 'on'")()
        AuditEvent.objects.filter(chain=ACME, seq=1).update(action="task.woken")

    assert "append-only: UPDATE" in refused(update_with_setting)


def test_the_retention_path_deletes_and_closes_the_door_behind_it(
    record_events: Callable[..., Any],
) -> None:
    with time_machine.travel(timezone.now() - timedelta(days=60), tick=False):
        record_events(3)
    record_events(1)
    with transaction.atomic():
        result = purge_tenant(tenant_slug="acme", older_than_days=30, actor=Actor.system("test"))
        # Same transaction, after the purge: the setting is off again.
        assert "append-only: DELETE" in refused(
            lambda: AuditEvent.objects.filter(chain=ACME).delete()
        )
    assert result.purged == 3
    assert verify_chain(ACME).ok


def test_checkpoints_are_append_only_too(record_events: Callable[..., Any]) -> None:
    with time_machine.travel(timezone.now() - timedelta(days=60), tick=False):
        record_events(2)
    purge_tenant(tenant_slug="acme", older_than_days=30, actor=Actor.system("test"))
    assert "append-only: UPDATE on audit_retentioncheckpoint" in refused(
        lambda: RetentionCheckpoint.objects.update(seq=1)
    )
    assert "append-only: DELETE on audit_retentioncheckpoint" in refused(
        lambda: RetentionCheckpoint.objects.all().delete()
    )


def test_deleting_a_task_leaves_its_audit_rows(make_task: Callable[..., Any]) -> None:
    task = make_task()
    task_id = task.pk
    task.delete()
    assert AuditEvent.objects.filter(task_id=task_id, action="task.created").exists()
