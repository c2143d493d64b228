"""Stored approval policies (issue 21 point 1): a tenant admin tightens a tool's approval gate
per tool and per argument value (e.g. ``environment=production`` needs two approvals from the
``release-managers`` group). Rules are versioned (a change is a new row; the newest is active)
and audited; the policy a gate applies — the tool's default merged with the matching rule — is
resolved when the gate is declared, with its digest, and stored on the gate.

Authorization is the caller's (access.may_manage_approvals)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from audit.record import Actor, record
from mcptasks.canonical import digest
from mcptasks.models import ApprovalPolicyRule, ReviewerGroup, Tenant


def save_rule(
    *,
    tenant: Tenant,
    actor: Actor,
    created_by: Any,
    tool_name: str,
    key: str = "approval",
    argument: str = "",
    value: str = "",
    required: int = 1,
    roles: list[str] | None = None,
    groups: list[str] | None = None,
    users: list[str] | None = None,
) -> ApprovalPolicyRule:
    """Store the next version of the rule for this selector (tool, gate key, argument=value)
    and make it the active one; audited as ``approval.policy_changed``."""
    if required < 1:
        raise ValueError("required must be at least 1")
    selector = {"tool_name": tool_name, "key": key, "argument": argument, "value": value}
    with transaction.atomic():
        previous = (
            ApprovalPolicyRule.objects.select_for_update()
            .filter(tenant=tenant, **selector)
            .order_by("-version")
            .first()
        )
        ApprovalPolicyRule.objects.filter(tenant=tenant, active=True, **selector).update(
            active=False
        )
        rule = ApprovalPolicyRule.objects.create(
            tenant=tenant,
            version=previous.version + 1 if previous else 1,
            required=required,
            roles=sorted(set(roles or [])),
            groups=sorted(set(groups or [])),
            users=sorted(set(users or [])),
            created_by=created_by,
            **selector,
        )
        record(
            action="approval.policy_changed",
            actor=actor,
            tenant_id=tenant.pk,
            tenant_slug=tenant.slug,
            data={**selector, "version": rule.version, "policy": rule_policy(rule)},
        )
    return rule


def rule_policy(rule: ApprovalPolicyRule) -> dict[str, Any]:
    return {
        "required": rule.required,
        "roles": list(rule.roles),
        "groups": list(rule.groups),
        "users": list(rule.users),
    }


def _matches(rule: ApprovalPolicyRule, arguments: dict[str, Any]) -> bool:
    if not rule.argument:
        return True
    return rule.argument in arguments and str(arguments[rule.argument]) == rule.value


def resolve(
    *, tenant_id: int, tool_name: str, key: str, arguments: dict[str, Any], default: dict[str, Any]
) -> dict[str, Any]:
    """The policy a gate applies: the tool's ``default``, or — when an active rule of the
    tenant matches (an argument-specific rule before a tool-wide one) — the rule's eligible set,
    with ``required`` never below the tool's default. Carries ``rule`` (id, version) and
    ``digest`` (of the policy) for the audit trail and the task's binding."""
    rules = [
        rule
        for rule in ApprovalPolicyRule.objects.filter(
            tenant_id=tenant_id, tool_name=tool_name, key=key, active=True
        ).order_by("-argument", "id")
        if _matches(rule, arguments)
    ]
    policy = dict(default)
    if rules:
        rule = rules[0]
        policy.update(rule_policy(rule))
        policy["required"] = max(rule.required, int(default.get("required", 1)))
        policy["rule"] = {"id": rule.pk, "version": rule.version}
    policy["digest"] = digest({k: v for k, v in policy.items() if k != "digest"})
    return policy


def save_group(*, tenant: Tenant, actor: Actor, name: str, members: list[str]) -> ReviewerGroup:
    """Create or replace the members of a tenant's reviewer group (usernames of the tenant's
    members; ValueError naming any other); audited as ``approval.group_changed``."""
    from django.contrib.auth import get_user_model

    wanted = sorted(set(members))
    users = list(
        get_user_model()
        .objects.filter(username__in=wanted, memberships__tenant=tenant, is_active=True)
        .distinct()
    )
    unknown = sorted(set(wanted) - {u.get_username() for u in users})
    if unknown:
        raise ValueError(f"not members of the tenant: {', '.join(unknown)}")
    with transaction.atomic():
        group, _ = ReviewerGroup.objects.select_for_update().get_or_create(tenant=tenant, name=name)
        group.members.set(users)
        record(
            action="approval.group_changed",
            actor=actor,
            tenant_id=tenant.pk,
            tenant_slug=tenant.slug,
            data={"group": name, "members": wanted},
        )
    return group
