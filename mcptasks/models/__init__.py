"""The durable task core, by sub-domain; every model and enum is re-exported here, so
``from mcptasks.models import X`` is the one import path (app label ``mcptasks``).

- ``principals``: tenants, memberships (roles), API tokens
- ``tasks``: tasks, their creation keys, replay steps and per-task delegations
- ``approvals``: input requests, approval decisions, reviewer groups, approval policies
- ``effects``: downstream effects and their reconciliation
- ``heartbeats``: signs of life of workers and the sweep
- ``mcptasks.outbox.models``: destinations, deliveries (the outbox)

Rows are written through ``mcptasks.lifecycle`` only (task state) and the token helpers;
``save()`` carries no logic (STYLE anti-patterns).
"""

from mcptasks.models.approvals import (
    ApprovalDecision,
    ApprovalPolicyRule,
    Audience,
    GateOutcome,
    InputKind,
    InputRequest,
    InputState,
    ReviewerGroup,
    Verdict,
)
from mcptasks.models.effects import Effect, EffectState
from mcptasks.models.heartbeats import Heartbeat
from mcptasks.models.principals import (
    TOKEN_PREFIX,
    ApiToken,
    Membership,
    Role,
    Tenant,
    hash_secret,
    scope_covers,
)
from mcptasks.models.tasks import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    Task,
    TaskCreationKey,
    TaskGroupObjectPermission,
    TaskState,
    TaskStep,
    TaskUserObjectPermission,
    new_task_id,
    terminal_grace,
)

# The outbox (issue 24): destinations of a tenant's events and deliveries to them.
from mcptasks.outbox.models import Delivery, DeliveryState, Destination

__all__ = [
    "ACTIVE_STATES",
    "TERMINAL_STATES",
    "TOKEN_PREFIX",
    "ApiToken",
    "ApprovalDecision",
    "ApprovalPolicyRule",
    "Audience",
    "Delivery",
    "DeliveryState",
    "Destination",
    "Effect",
    "EffectState",
    "GateOutcome",
    "Heartbeat",
    "InputKind",
    "InputRequest",
    "InputState",
    "Membership",
    "ReviewerGroup",
    "Role",
    "Task",
    "TaskCreationKey",
    "TaskGroupObjectPermission",
    "TaskState",
    "TaskStep",
    "TaskUserObjectPermission",
    "Tenant",
    "Verdict",
    "hash_secret",
    "new_task_id",
    "scope_covers",
    "terminal_grace",
]
