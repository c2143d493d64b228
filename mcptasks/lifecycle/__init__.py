"""Every write of task state (DESIGN §2, STYLE rules 2–3): the one writer.

Only this package writes a task's state. Its modules split the verbs by sub-domain — ``_core``
(states, errors, the conditional UPDATE, audit, fencing, the open-effects rule), ``creation``,
``execution``, ``inputs``, ``cancel``, ``effects``, ``retention`` and ``delegations`` — and this
module re-exports their public names: callers write ``lifecycle.task_x(...)``.
"""

from audit.record import Actor
from mcptasks.lifecycle._core import (
    AWAITING_STATES,
    INTERNAL_ERROR,
    LEGAL_MOVES,
    SUSPENDED_STATES,
    TRANSITIONS,
    AtCapacity,
    AttemptMayBeAlive,
    DecisionRefused,
    EffectNotUnknown,
    InputNotPending,
    InvalidTransition,
    LifecycleError,
    NotRetryable,
    StaleAttempt,
    TaskNotFound,
    error_object,
)
from mcptasks.lifecycle.cancel import task_cancel_now, task_force_cancel, task_request_cancel
from mcptasks.lifecycle.creation import (
    AnsweredInput,
    CreationKeyConflict,
    LimitExceeded,
    NewTask,
    task_create,
    task_retry,
)
from mcptasks.lifecycle.delegations import task_grant_delegation
from mcptasks.lifecycle.effects import (
    RECONCILE_DECISIONS,
    task_effect_applied,
    task_effect_intended,
    task_mark_effect_unknown,
    task_reconcile_effect,
)
from mcptasks.lifecycle.execution import (
    task_claim,
    task_complete,
    task_fail,
    task_note_binding_change,
    task_record_job,
    task_record_step,
    task_record_step_log,
    task_renew_lease,
    task_report,
    task_requeue,
    task_sleep,
    task_stop_overrun,
    task_wake,
)
from mcptasks.lifecycle.inputs import (
    InputSpec,
    task_answer_input,
    task_decide_approval,
    task_request_input,
    task_timeout_input,
)
from mcptasks.lifecycle.retention import UNDECIDED_EFFECTS, task_expire, task_purge

__all__ = [
    "AWAITING_STATES",
    "INTERNAL_ERROR",
    "LEGAL_MOVES",
    "RECONCILE_DECISIONS",
    "SUSPENDED_STATES",
    "TRANSITIONS",
    "UNDECIDED_EFFECTS",
    "Actor",
    "AnsweredInput",
    "AtCapacity",
    "AttemptMayBeAlive",
    "CreationKeyConflict",
    "DecisionRefused",
    "EffectNotUnknown",
    "InputNotPending",
    "InputSpec",
    "InvalidTransition",
    "LifecycleError",
    "LimitExceeded",
    "NewTask",
    "NotRetryable",
    "StaleAttempt",
    "TaskNotFound",
    "error_object",
    "task_answer_input",
    "task_cancel_now",
    "task_claim",
    "task_complete",
    "task_create",
    "task_decide_approval",
    "task_effect_applied",
    "task_effect_intended",
    "task_expire",
    "task_fail",
    "task_force_cancel",
    "task_grant_delegation",
    "task_mark_effect_unknown",
    "task_note_binding_change",
    "task_purge",
    "task_reconcile_effect",
    "task_record_job",
    "task_record_step",
    "task_record_step_log",
    "task_renew_lease",
    "task_report",
    "task_request_cancel",
    "task_request_input",
    "task_requeue",
    "task_retry",
    "task_sleep",
    "task_stop_overrun",
    "task_timeout_input",
    "task_wake",
]
