"""Read-only selectors of the dashboard (STYLE rule 1: lifecycle writes, queries read).

``from mcptasks import queries`` and ``queries.<name>``:

* :mod:`~mcptasks.queries.listing` — the tasks list and the audit list (keyset pages, cursors);
* :mod:`~mcptasks.queries.waiting` — what waits on a user, listed and counted per tenant;
* :mod:`~mcptasks.queries.detail` — what the task page shows beyond the doorway
  (``access.task_for`` fetches and decides; ``task_detail`` assembles).
"""

from mcptasks.queries.detail import (
    DETAIL_RELATED,
    TIMELINE_LIMIT,
    InputView,
    TaskDetail,
    find_task,
    get_task,
    secret_fields,
    sensitive_keys_of,
    shown,
    task_detail,
)
from mcptasks.queries.listing import (
    AUDIT_ACTIONS,
    COUNT_CAP,
    DEFAULT_SORT,
    LIST_DEFERRED,
    MERGE_TENANTS_MAX,
    OUTCOMES,
    PAGE_SIZE,
    REJECTED,
    SHOWN_BYTES,
    SORTS,
    AuditFilters,
    Page,
    TaskFilters,
    audit_event,
    audit_page,
    decode_cursor,
    encode_cursor,
    task_page,
    task_row,
    tool_names,
)
from mcptasks.queries.waiting import (
    INBOX_LIMIT,
    STUCK_CANCEL_S,
    Inbox,
    InboxCounts,
    inbox,
    inbox_counts_by_tenant,
)

__all__ = [
    "AUDIT_ACTIONS",
    "COUNT_CAP",
    "DEFAULT_SORT",
    "DETAIL_RELATED",
    "INBOX_LIMIT",
    "LIST_DEFERRED",
    "MERGE_TENANTS_MAX",
    "OUTCOMES",
    "PAGE_SIZE",
    "REJECTED",
    "SHOWN_BYTES",
    "SORTS",
    "STUCK_CANCEL_S",
    "TIMELINE_LIMIT",
    "AuditFilters",
    "Inbox",
    "InboxCounts",
    "InputView",
    "Page",
    "TaskDetail",
    "TaskFilters",
    "audit_event",
    "audit_page",
    "decode_cursor",
    "encode_cursor",
    "find_task",
    "get_task",
    "inbox",
    "inbox_counts_by_tenant",
    "secret_fields",
    "sensitive_keys_of",
    "shown",
    "task_detail",
    "task_page",
    "task_row",
    "tool_names",
]
