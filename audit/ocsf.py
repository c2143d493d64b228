"""Audit events rendered as OCSF 1.3 events (docs/audit.md, "OCSF").

:func:`to_ocsf` maps one stored event (a dict of :data:`audit.chain.ROW_FIELDS`) to an event of
one of three OCSF classes — Authentication (3002), Account Change (3001) or API Activity (6003)
— chosen per action by :data:`MAPPING`; an action not in the table (one added later) renders
as API Activity with activity "Other" (99), so nothing is ever dropped. The stored event rides
along unchanged in ``unmapped.mcptasks_audit``, so an OCSF export still carries what each
event's hash covers and ``verify_export`` can recompute it (and re-render the OCSF part).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

OCSF_VERSION = "1.3.0"
PRODUCT = {"name": "mcptasks", "vendor_name": "mcptasks"}

AUTHENTICATION = (3002, "Authentication", 3, "Identity & Access Management")
ACCOUNT_CHANGE = (3001, "Account Change", 3, "Identity & Access Management")
API_ACTIVITY = (6003, "API Activity", 6, "Application Activity")

# Required attributes (OCSF 1.3): the base event's, plus each class's own.
BASE_REQUIRED = (
    "activity_id",
    "category_uid",
    "class_uid",
    "metadata",
    "severity_id",
    "time",
    "type_uid",
)
CLASS_REQUIRED = {
    3002: ("user",),
    3001: ("user",),
    6003: ("actor", "api", "src_endpoint"),
}

OTHER = 99


@dataclass(frozen=True)
class Mapping:
    klass: tuple[int, str, int, str]
    activity_id: int
    activity_name: str
    failure: bool = False


def _api(activity_id: int) -> Mapping:
    names = {1: "Create", 2: "Read", 3: "Update", 4: "Delete", OTHER: "Other"}
    return Mapping(API_ACTIVITY, activity_id, names[activity_id])


CREATE, READ, UPDATE, DELETE = (_api(n) for n in (1, 2, 3, 4))
MAPPING: dict[str, Mapping] = {
    "auth.login": Mapping(AUTHENTICATION, 1, "Logon"),
    "auth.logout": Mapping(AUTHENTICATION, 2, "Logoff"),
    "auth.login_failed": Mapping(AUTHENTICATION, 1, "Logon", failure=True),
    "token.issued": Mapping(ACCOUNT_CHANGE, OTHER, "Credential Issued"),
    "token.revoked": Mapping(ACCOUNT_CHANGE, OTHER, "Credential Revoked"),
    "membership.added": Mapping(ACCOUNT_CHANGE, 7, "Attach Policy"),
    "delegation.granted": Mapping(ACCOUNT_CHANGE, 7, "Attach Policy"),
    "delegation.revoked": Mapping(ACCOUNT_CHANGE, 8, "Detach Policy"),
    "tenant.created": CREATE,
    "task.created": CREATE,
    "task.started": UPDATE,
    "task.requeued": UPDATE,
    "task.input_requested": UPDATE,
    "task.input_answered": UPDATE,
    "task.input_timed_out": UPDATE,
    "task.sleeping": UPDATE,
    "task.woken": UPDATE,
    "task.completed": UPDATE,
    "task.failed": UPDATE,
    "task.cancel_requested": UPDATE,
    "task.cancelled": UPDATE,
    "task.force_cancelled": UPDATE,
    "task.expired": UPDATE,
    "task.binding_changed": UPDATE,
    "task.changed": UPDATE,
    "task.purged": DELETE,
    "effect.unknown": UPDATE,
    "effect.reconciled": UPDATE,
    "audit.exported": READ,
    "audit.purged": DELETE,
    "legal_hold.placed": CREATE,
    "legal_hold.released": UPDATE,
    "approval.approved": UPDATE,
    "approval.rejected": UPDATE,
    "approval.gate_opened": UPDATE,
    "approval.policy_changed": Mapping(ACCOUNT_CHANGE, 7, "Attach Policy"),
    "approval.group_changed": Mapping(ACCOUNT_CHANGE, OTHER, "Reviewer Group Changed"),
    "task.retried": UPDATE,
    "task.retry_of": CREATE,
    "destination.created": CREATE,
    "destination.changed": UPDATE,
    "destination.deleted": DELETE,
    "destination.redelivered": UPDATE,
}
DEFAULT = _api(OTHER)

# actor_kind → OCSF user type_id (0 Unknown, 1 User, 2 Admin, 3 System)
USER_TYPES = {"principal": 1, "user": 1, "operator": 2, "system": 3, "anonymous": 0}
USER_TYPE_NAMES = {0: "Unknown", 1: "User", 2: "Admin", 3: "System"}


def mapping_of(action: str) -> Mapping:
    return MAPPING.get(action, DEFAULT)


def _epoch_ms(created_at: str) -> int:
    return int(datetime.fromisoformat(created_at).timestamp() * 1000)


def _user(uid: Any, name: Any, kind: str = "") -> dict[str, Any]:
    user: dict[str, Any] = {"name": str(name or "")}
    if uid not in (None, ""):
        user["uid"] = str(uid)
    if kind:
        user["type_id"] = USER_TYPES.get(kind, 99)
        user["type"] = USER_TYPE_NAMES.get(user["type_id"], kind)
    return user


def _subject(event: dict[str, Any], mapping: Mapping) -> dict[str, Any]:
    """The ``user`` of an IAM event: who logged on, or whose account changed."""
    data = event.get("data") or {}
    if mapping.klass is AUTHENTICATION:
        return _user(event["actor_id"], data.get("username") or event["actor_display"])
    if event["action"].startswith("token."):
        return _user(data.get("owner_id"), data.get("owner"))
    if event["action"].startswith("delegation."):
        return _user(data.get("grantee_id"), data.get("grantee"))
    return _user(data.get("user_id"), data.get("user"))


def to_ocsf(event: dict[str, Any]) -> dict[str, Any]:
    """One stored audit event as an OCSF event (see the module docstring)."""
    mapping = mapping_of(event["action"])
    class_uid, class_name, category_uid, category_name = mapping.klass
    data = event.get("data") or {}
    data = data if isinstance(data, dict) else {"value": data}
    activity_name = mapping.activity_name
    rendered: dict[str, Any] = {
        "class_uid": class_uid,
        "class_name": class_name,
        "category_uid": category_uid,
        "category_name": category_name,
        "activity_id": mapping.activity_id,
        "activity_name": activity_name,
        "type_uid": class_uid * 100 + mapping.activity_id,
        "type_name": f"{class_name}: {activity_name}",
        "time": _epoch_ms(event["created_at"]),
        "severity_id": 2 if mapping.failure else 1,
        "severity": "Low" if mapping.failure else "Informational",
        "status_id": 2 if mapping.failure else 1,
        "status": "Failure" if mapping.failure else "Success",
        "message": f"{event['action']} by {event['actor_display'] or event['actor_kind']}",
        "metadata": {
            "version": OCSF_VERSION,
            "product": PRODUCT,
            "uid": f"{event['chain']}:{event['seq']}",
            "sequence": event["seq"],
            "log_name": event["chain"],
            "event_code": event["action"],
            "original_time": event["created_at"],
            **({"correlation_uid": event["request_id"]} if event.get("request_id") else {}),
        },
        "actor": {
            "user": _user(event["actor_id"], event["actor_display"], event["actor_kind"]),
        },
        "src_endpoint": {"ip": data["ip"]} if data.get("ip") else {"name": "mcptasks"},
        "unmapped": {"mcptasks_audit": event},
    }
    if data.get("user_agent"):
        rendered["http_request"] = {"user_agent": data["user_agent"]}
    if class_uid == API_ACTIVITY[0]:
        api: dict[str, Any] = {"operation": event["action"], "service": {"name": "mcptasks"}}
        if event.get("request_id"):
            api["request"] = {"uid": event["request_id"]}
        rendered["api"] = api
        if event.get("task_id"):
            rendered["resources"] = [{"type": "task", "uid": event["task_id"]}]
    else:
        rendered["user"] = _subject(event, mapping)
    if class_uid == AUTHENTICATION[0]:
        rendered["service"] = {"name": "mcptasks"}  # at least one of service, dst_endpoint
    if event["action"] == "membership.added" and data.get("role"):
        rendered["policy"] = {"name": str(data["role"])}
    elif event["action"].startswith("delegation.") and data.get("delegation"):
        rendered["policy"] = {"name": str(data["delegation"])}
    return rendered


def missing_required(rendered: dict[str, Any]) -> list[str]:
    """The required attributes of the rendering's class that it lacks (empty: valid)."""
    required = (*BASE_REQUIRED, *CLASS_REQUIRED.get(rendered.get("class_uid", 0), ()))
    missing = [name for name in required if rendered.get(name) in (None, "", {})]
    metadata = rendered.get("metadata") or {}
    if not metadata.get("version") or not (metadata.get("product") or {}).get("vendor_name"):
        missing.append("metadata.version/product.vendor_name")
    if "api" in CLASS_REQUIRED.get(rendered.get("class_uid", 0), ()) and not (
        rendered.get("api") or {}
    ).get("operation"):
        missing.append("api.operation")
    return missing
