"""Per-task rights granted to and revoked from a tenant member."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from audit.record import Actor
from mcptasks import access
from mcptasks.lifecycle._core import LifecycleError, TaskNotFound, _audit
from mcptasks.models import Task


class DelegationNotHeld(LifecycleError):
    """A revoke of a delegation the grantee does not hold; nothing was written."""

    def __init__(self, grantee: str, delegation: str) -> None:
        super().__init__(f"{grantee!r} holds no {delegation} delegation on this task.")
        self.grantee, self.delegation = grantee, delegation


def task_grant_delegation(
    *, task_id: str, actor: Actor, grantee: Any, delegation: str, revoke: bool = False
) -> Task:
    """Grant (or revoke) a per-task right for ``grantee``; audited. The caller authorized it
    with ``access.can(..., Action.GRANT, ...)``. Revoking a delegation the grantee does not
    hold raises :class:`DelegationNotHeld` and writes nothing (no audit row, no outbox row)."""
    if delegation not in access.DELEGATIONS:
        raise ValueError(f"delegation must be one of {', '.join(access.DELEGATIONS)}")
    with transaction.atomic():
        task = Task.objects.select_related("tenant").filter(pk=task_id).first()
        if task is None:
            raise TaskNotFound(task_id)
        if revoke:
            if (grantee, delegation) not in access.delegations_of(task):
                raise DelegationNotHeld(grantee.get_username(), delegation)
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
