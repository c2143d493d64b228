"""The forms of the dashboard's approval policy management (issue 21): a policy rule per tool
and argument value, and a reviewer group's members. They parse and validate against the tenant
(its reviewer groups and members, the tool's input schema); approval_policies saves."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib.auth import get_user_model

from mcptasks import approval_policies
from mcptasks.models import Membership, ReviewerGroup, Role, Tenant
from mcptasks.tools.registry import ToolDef, registry

REQUIRED_MAX = 20
_NAMES = re.compile(r"[\s,]+")
ROLE_CHOICES = [(Role.OPERATOR, "operator"), (Role.ADMIN, "admin"), (Role.MEMBER, "member")]


def gated_tools() -> list[ToolDef]:
    """The registered tools that declare approval gates (call ``ctx.approve``)."""
    return sorted(
        (tool for tool in registry.all() if approval_policies.declares_gates(tool.fn)),
        key=lambda tool: tool.name,
    )


def _names(text: str) -> list[str]:
    return sorted({name for name in _NAMES.split(text or "") if name})


class PolicyRuleForm(forms.Form):
    """A rule for one tool's gate, for every call or only those whose ``argument`` equals
    ``value``. Editing a rule (``fixed``) keeps its selector and changes its policy."""

    tool = forms.ChoiceField(label="Tool")
    key = forms.CharField(label="Gate key", max_length=200, initial="approval")
    argument = forms.CharField(
        label="Only when argument", max_length=128, required=False, help_text="e.g. environment"
    )
    value = forms.CharField(
        label="equals", max_length=500, required=False, help_text="e.g. production"
    )
    required = forms.IntegerField(
        label="Required approvals", min_value=1, max_value=REQUIRED_MAX, initial=1
    )
    roles = forms.MultipleChoiceField(
        label="Roles that may approve",
        choices=ROLE_CHOICES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    groups = forms.MultipleChoiceField(
        label="Reviewer groups", required=False, widget=forms.CheckboxSelectMultiple
    )
    users = forms.CharField(
        label="Named users",
        required=False,
        max_length=2000,
        help_text="Usernames of the tenant's members, separated by spaces or commas.",
    )
    redact = forms.CharField(
        label="Argument fields to mask on the approval page",
        required=False,
        max_length=2000,
        help_text="Argument names, separated by spaces or commas.",
    )

    def __init__(
        self, *args: Any, tenant: Tenant, fixed: dict[str, str] | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("prefix", "rule")
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.fixed = fixed
        names = [tool.name for tool in gated_tools()]
        if fixed and fixed["tool_name"] not in names:
            names.append(fixed["tool_name"])
        self.fields["tool"].choices = [(name, name) for name in names]  # type: ignore[attr-defined]
        self.fields["groups"].choices = [  # type: ignore[attr-defined]
            (name, name)
            for name in ReviewerGroup.objects.filter(tenant=tenant)
            .order_by("name")
            .values_list("name", flat=True)
        ]
        if fixed:
            for name, field in (
                ("tool", "tool_name"),
                ("key", "key"),
                ("argument", "argument"),
                ("value", "value"),
            ):
                self.fields[name].disabled = True
                self.fields[name].initial = fixed[field]

    def _schema_properties(self, tool_name: str) -> dict[str, Any] | None:
        tool = registry.get(tool_name)
        if tool is None:
            return None
        return dict((tool.input_schema or {}).get("properties") or {})

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tool_name = cleaned.get("tool") or ""
        properties = self._schema_properties(tool_name) if tool_name else None
        argument = (cleaned.get("argument") or "").strip()
        value = (cleaned.get("value") or "").strip()
        if bool(argument) != bool(value):
            self.add_error("value", "Give the argument and its value together, or neither.")
        elif argument and properties is not None and not self.fixed:
            if argument not in properties:
                self.add_error(
                    "argument",
                    f"{tool_name} has no argument {argument!r}: one of "
                    f"{', '.join(sorted(properties)) or 'none'}.",
                )
            else:
                allowed = properties[argument].get("enum")
                if allowed is not None and value not in [str(v) for v in allowed]:
                    self.add_error(
                        "value", f"{argument} is one of {', '.join(str(v) for v in allowed)}."
                    )
        cleaned["argument"], cleaned["value"] = argument, value
        users = _names(cleaned.get("users", ""))
        self._check_users(users)
        cleaned["users"] = users
        redact = _names(cleaned.get("redact", ""))
        unknown = [name for name in redact if properties is not None and name not in properties]
        if unknown:
            self.add_error("redact", f"{tool_name} has no argument {', '.join(unknown)}.")
        cleaned["redact"] = redact
        if not (cleaned.get("roles") or cleaned.get("groups") or users):
            self.add_error("roles", "Name at least one role, reviewer group or user.")
        return cleaned

    def _check_users(self, users: list[str]) -> None:
        if not users:
            return
        roles: dict[str, set[str]] = {}
        for username, role in Membership.objects.filter(
            tenant=self.tenant, user__username__in=users, user__is_active=True
        ).values_list("user__username", "role"):
            roles.setdefault(username, set()).add(role)
        unknown = [name for name in users if name not in roles]
        if unknown:
            self.add_error("users", f"Not members of {self.tenant.name}: {', '.join(unknown)}.")
        auditors = [name for name in users if Role.AUDITOR in roles.get(name, set())]
        if auditors:
            self.add_error(
                "users", f"An auditor may not decide on approvals: {', '.join(auditors)}."
            )


class ReviewerGroupForm(forms.Form):
    """A reviewer group's name (fixed once created) and members (the tenant's members)."""

    name = forms.SlugField(label="Group name", max_length=64)
    members = forms.MultipleChoiceField(
        label="Members", required=False, widget=forms.CheckboxSelectMultiple
    )

    def __init__(self, *args: Any, tenant: Tenant, fixed_name: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("prefix", "group")
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        people = (
            get_user_model()
            .objects.filter(memberships__tenant=tenant, is_active=True)
            .distinct()
            .order_by("username")
        )
        self.fields["members"].choices = [  # type: ignore[attr-defined]
            (user.get_username(), user.get_username()) for user in people
        ]
        if fixed_name:
            self.fields["name"].disabled = True
            self.fields["name"].initial = fixed_name

    def clean_name(self) -> str:
        name = str(self.cleaned_data["name"])
        exists = ReviewerGroup.objects.filter(tenant=self.tenant, name=name).exists()
        if exists and not self.fields["name"].disabled:
            raise forms.ValidationError(f"{self.tenant.name} already has a group {name!r}.")
        return name
