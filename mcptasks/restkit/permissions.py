"""The one permission class of every REST view: every decision is mcptasks.access's (STYLE rule 5).

Views fetch objects through access's visibility questions first, so an object the caller may
not see is a 404 before this class runs; this class then answers "may this caller do this to
that", and a refusal is a 403 carrying access's reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from mcptasks import access
from mcptasks.models import Effect, InputRequest, Task
from mcptasks.restkit.errors import sentence

# View-level rules (``access_rule`` on a view): asked before any object is fetched.
READ_AUDIT = "read_audit"


@dataclass(frozen=True)
class AuditScope:
    """The audit chain a request reads or exports: a tenant's, or (``tenant_id`` None) the
    system chain or every chain."""

    tenant_id: int | None


def decide(user: Any, action: access.Action | None, obj: Any) -> access.Decision:
    """access.py's answer to "may ``user`` do ``action`` to ``obj``"."""
    if isinstance(obj, Task):
        if action is None:
            raise ValueError("a task permission needs an access.Action")
        return access.can(user, action, obj)
    if isinstance(obj, InputRequest):
        return access.may_answer(user, obj, obj.task)
    if isinstance(obj, Effect):
        return access.can(user, access.Action.RECONCILE, obj.task)
    if isinstance(obj, AuditScope):
        if access.may_read_audit(user, obj.tenant_id):
            return access.ALLOW
        return access.Decision(
            False,
            "not permitted to read this audit chain"
            if obj.tenant_id is not None
            else "only staff operators read the system chain or every chain",
        )
    raise TypeError(f"no access rule for {type(obj).__name__}")


class AccessPermission(BasePermission):
    """Delegates to access.py. A view sets ``access_action`` (an ``access.Action`` for task
    objects) and optionally ``access_rule`` (a view-level rule such as :data:`READ_AUDIT`)."""

    message = "You do not have permission to perform this action."

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if user is None or not user.is_authenticated:
            return False
        if getattr(view, "access_rule", None) == READ_AUDIT and access.audit_tenants(user) == []:
            self.message = (
                "Not permitted to read audit events: the auditors, admins and "
                "operators of a tenant read its audit trail."
            )
            return False
        return True

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        decision = decide(request.user, getattr(view, "access_action", None), obj)
        if not decision:
            self.message = sentence(decision.reason) or self.message
            return False
        return True
