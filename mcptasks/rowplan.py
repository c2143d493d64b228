"""Model instances from raw rows, as the ORM builds them, without compiling a query per call.

A :class:`RowPlan` holds one model's columns in a hand-written statement and the converters the
ORM would apply to each (the backend's, then the field's, as ``SQLCompiler.get_converters``
does). :meth:`RowPlan.instance` builds what ``model.from_db`` would, without its pass through
``Model.__init__``; fields not in the plan are deferred. Used by the hot paths that read or
return rows with one statement: token lookup (mcptasks/auth.py), a move's ``RETURNING``
(mcptasks/lifecycle/_core.py) and a task's recorded context (mcptasks/task_context.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models.base import ModelState


@dataclass(frozen=True)
class RowPlan:
    model: Any
    columns: tuple[str, ...]  # qualified by the statement's table name or alias
    attnames: tuple[str, ...]
    converters: tuple[tuple[int, Callable[[Any], Any]], ...]  # (index, convert)
    db: Any

    @classmethod
    def of(
        cls, model: Any, table: str, *, names: frozenset[str] | None = None, db: Any = connection
    ) -> RowPlan:
        """The plan of ``model``'s fields in model order (``names`` only, if given), their
        columns qualified by ``table`` (a quoted table name or an alias), on ``db`` (a
        connection; the default connection of the calling thread unless given)."""
        fields = [f for f in model._meta.concrete_fields if names is None or f.attname in names]
        converters = []
        for index, field in enumerate(fields):
            col = field.get_col(table)
            chain = db.ops.get_db_converters(col) + col.get_db_converters(db)
            if chain:
                converters.append((index, _converter(tuple(chain), col, db)))
        return cls(
            model,
            tuple(f'{table}."{f.column}"' for f in fields),
            tuple(f.attname for f in fields),
            tuple(converters),
            db,
        )

    def instance(self, row: Sequence[Any]) -> Any:
        values = list(row)
        for index, convert in self.converters:
            values[index] = convert(values[index])
        instance = self.model.__new__(self.model)
        instance._state = ModelState()
        instance._state.adding, instance._state.db = False, self.db.alias
        instance.__dict__.update(zip(self.attnames, values, strict=True))
        return instance


def _converter(chain: tuple[Any, ...], col: Any, db: Any) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        for step in chain:
            value = step(value, col, db)
        return value

    return convert
