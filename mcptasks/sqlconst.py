"""Code constants written into a statement instead of bound to it (issue 23).

Values are bound server-side and a statement a connection runs often is prepared
(:func:`mcptasks.conf.postgres_database`); after five executions PostgreSQL weighs a generic
plan, made without the values, against planning for each. A bound ``state`` makes the generic
plan blind: it cannot prove a partial index's condition (``state = 'running'`` inside the
active states) nor see that a state is rare, so it looks worse and every execution is planned
afresh — over every day partition of the task table, the most expensive part of a dashboard
page's query at a million tasks (``bench/PROFILE-23.md``). A state the code chose, written as
a literal, keeps the generic plan as good as a custom one.
"""

from __future__ import annotations

import re

from django.db.models import CharField
from django.db.models.expressions import RawSQL

_WORD = re.compile(r"[a-z][a-z_]*")


def written(value: str) -> RawSQL:
    """``value``, a choice of a model field (lower-case letters and underscores), as a SQL
    literal for a filter: ``Q(state=written(TaskState.RUNNING))``. Never for input: anything
    else is refused."""
    if not _WORD.fullmatch(value):
        raise ValueError(f"not a code constant: {value!r}")
    return RawSQL(f"'{value}'", [], output_field=CharField())  # noqa: S611 - checked above
