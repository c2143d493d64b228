"""The list pages' filters behind a disclosure on narrow screens.

On a phone the Tasks and Audit filter forms sit in a ``<details>`` whose summary says how many
filters are active; it is rendered open when any is (or when the form has errors to show), so a
filtered view never hides what filters it. Wider screens always show the form (the stylesheet).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms


@dataclass(frozen=True)
class FilterDisclosure:
    active: int  # filters that narrow (or widen) the list away from what it shows by default
    open: bool  # rendered open: filters active, or errors to show


def disclosure(
    form: forms.Form,
    params: Mapping[str, Any],
    *,
    defaults: Mapping[str, str],
    ignore: Collection[str] = (),
) -> FilterDisclosure:
    """Count the fields of ``form`` given a value in ``params`` (the request's GET): a field
    in ``defaults`` (the tenant scope) counts when given a value other than its default, the
    others when given any value; ``ignore`` (the order) never counts."""
    active = 0
    for name in form.fields:
        value = params.get(name)
        if name in ignore or not isinstance(value, str):
            continue
        value = value.strip()
        changed = value != defaults[name] if name in defaults else value != ""
        active += changed
    return FilterDisclosure(active=active, open=bool(active or form.errors))
