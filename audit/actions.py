"""The one table of audit actions: every action the code records (docs/audit.md, "Coverage"),
with what each reader of the trail needs of it — the dashboard's label, the CEF signature id,
name and severity a syslog destination sends, and whether the dashboard's audit filter offers
it. Derived from it: ``mcptasks.queries.AUDIT_ACTIONS``, ``dashboard_tags.ACTION_LABELS`` and
the audit rows of ``mcptasks.sinks.syslog.CEF_EVENTS``. tests/audit/test_actions.py holds the
code to it: an action recorded anywhere is in the table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AuditAction:
    """One audit action. ``label``: the dashboard's name for it (None: it shows the action);
    ``cef_id``, ``cef_name``, ``severity``: its CEF signature (severity 0 lowest … 10 highest:
    routine 1–3, worth a look 4–5, a change of who may do what or of an outcome nobody knows
    6–7, weakening the trail's protection 8); ``listed``: offered by the dashboard's filter."""

    action: str
    label: str | None
    cef_id: int
    cef_name: str
    severity: int
    listed: bool = True


def _rows(*rows: AuditAction) -> dict[str, AuditAction]:
    table = {row.action: row for row in rows}
    assert len(table) == len(rows), "an action is listed twice"
    return table


# CEF numbers by area: 1xx tasks, 2xx effects, 3xx approvals, 4xx identity and access, 5xx the
# audit trail itself, 6xx where events go. In the order the dashboard's filter offers them.
A = AuditAction
ACTIONS: dict[str, AuditAction] = _rows(
    A("task.created", "Created", 100, "Task created", 3),
    A("task.started", "Attempt started", 101, "Task started", 2),
    A("task.input_requested", "Input requested", 103, "Input requested", 3),
    A("task.input_answered", "Input answered", 104, "Input answered", 3),
    A("approval.approved", "Approved", 301, "Approval given", 5),
    A("approval.rejected", "Rejected", 302, "Approval rejected", 5),
    A("approval.gate_opened", "Approval gate opened", 303, "Approval gate opened", 5),
    A("approval.policy_changed", None, 305, "Approval policy changed", 7),
    A("approval.group_changed", None, 306, "Reviewer group changed", 7),
    A("task.input_timed_out", "Input timed out", 105, "Input timed out", 4),
    A("task.sleeping", "Sleeping", 106, "Task sleeping", 1),
    A("task.woken", "Woken", 107, "Task woken", 1),
    A("task.requeued", "Requeued (lease expired)", 102, "Task requeued", 4),
    A("task.cancel_requested", "Cancel requested", 110, "Cancel requested", 4),
    A("task.cancelled", "Cancelled", 111, "Task cancelled", 4),
    A("task.force_cancelled", "Force-cancelled", 112, "Task force-cancelled", 6),
    A("task.completed", "Completed", 108, "Task completed", 3),
    A("task.failed", "Failed", 109, "Task failed", 5),
    A("task.expired", "Expired", 113, "Task expired", 3),
    A("task.purged", "Purged", 114, "Task purged", 3),
    A("task.binding_changed", "Binding changed", 115, "Task binding changed", 5),
    A("effect.unknown", "Effect outcome unknown", 200, "Effect outcome unknown", 7),
    A("effect.reconciled", "Effect reconciled", 201, "Effect reconciled", 6),
    A("delegation.granted", "Delegation granted", 421, "Delegation granted", 6),
    A("delegation.revoked", "Delegation revoked", 422, "Delegation revoked", 5),
    A("token.issued", "Token issued", 410, "Token issued", 5),
    A("token.revoked", "Token revoked", 411, "Token revoked", 5),
    A("audit.exported", "Audit exported", 500, "Audit trail exported", 5),
    A("audit.purged", "Audit purged (retention)", 501, "Audit events purged", 7),
    A("auth.login", None, 400, "Login", 3),
    A("auth.logout", None, 401, "Logout", 2),
    A("auth.login_failed", None, 402, "Login failed", 6),
    # Recorded, not (yet) offered by the dashboard's filter (typed in, they still filter).
    A("task.retried", None, 117, "Task retried", 4, listed=False),
    A("task.retry_of", None, 118, "Task created as a retry", 4, listed=False),
    A("membership.added", None, 420, "Membership added", 6, listed=False),
    A("tenant.created", None, 430, "Tenant created", 6, listed=False),
    A("legal_hold.placed", None, 510, "Legal hold placed", 6, listed=False),
    A("legal_hold.released", None, 511, "Legal hold released", 8, listed=False),
    A("destination.created", None, 600, "Destination created", 6, listed=False),
    A("destination.changed", None, 601, "Destination changed", 6, listed=False),
    A("destination.deleted", None, 602, "Destination deleted", 7, listed=False),
    A("destination.redelivered", None, 603, "Delivery redelivered", 4, listed=False),
)
del A

# The dashboard's audit filter offers these, in this order.
LISTED: tuple[str, ...] = tuple(row.action for row in ACTIONS.values() if row.listed)
# The dashboard's label of an action that has one.
LABELS: dict[str, str] = {row.action: row.label for row in ACTIONS.values() if row.label}
