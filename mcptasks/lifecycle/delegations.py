"""Per-task rights granted to and revoked from a tenant member."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from audit.record import Actor
from mcptasks import access
from mcptasks.lifecycle._core import TaskNotFound, _audit
from mcptasks.models import Task


def task_grant_delegation(
    *, task_id: str, actor: Actor, grantee: Any, delegation: str, revoke: bool = False
) -> Task:
    """Grant (or revoke) a per-task right for ``grantee``; audited. The caller authorized it
    with ``access.can(..., Action.GRANT, ...)``."""
    if delegation not in access.DELEGATIONS:
        raise ValueError(f"delegation must be one of {', '.join(access.DELEGATIONS)}")
    with transaction.atomic():
        task = Task.objects.select_related("tenant").filter(pk=task_id).first()
        if task is None:
            raise TaskNotFound(task_id)
        if revoke:
            access.remove_delegation(grantee=grantee, task=task, delegation=delegation)
        else:
            access.assign_delegation(grantee=grantee, task=task, delegation=delegation)
        _audit(
            task,
            "delegation.revoked" if revoke else "delegation.granted",
            actor,
            {"grantee": grantee.get_username(), "grantee_id": grantee.pk, "delegation": delegation},
        )
    return task
