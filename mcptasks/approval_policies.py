"""Stored approval policies (issue 21 point 1): a tenant admin tightens a tool's approval gate
per tool and per argument value (e.g. ``environment=production`` needs two approvals from the
``release-managers`` group). Rules are versioned (a change is a new row; the newest is active)
and audited; the policy a gate applies — the tool's default merged with the matching rule — is
resolved when the gate is declared, with its digest, and stored on the gate.

Policy digest binding: a task of a tool that declares gates binds, at creation, the digest of
the tenant's active rules for that tool that match its arguments (:func:`bound_revision`, the
second half of ``Task.policy_revision``); a gate declared later under other rules notes the
change (audited ``task.binding_changed``).

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
    redact: list[str] | None = None,
) -> ApprovalPolicyRule:
    """Store the next version of the rule for this selector (tool, gate key, argument=value)
    and make it the active one; audited as ``approval.policy_changed``. ``redact``: argument
    fields masked on the approval page (added to the tool's own)."""
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
            redact=sorted(set(redact or [])),
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


def delete_rule(
    *, tenant: Tenant, actor: Actor, created_by: Any, rule_id: int
) -> ApprovalPolicyRule:
    """Withdraw the active rule ``rule_id`` of ``tenant``: its selector's next version is a
    tombstone (stored inactive, so the newest version of the selector is inactive and gates
    fall back to the tool's default); audited as ``approval.policy_changed`` with
    ``deleted: true``. Raises ApprovalPolicyRule.DoesNotExist for no such active rule."""
    with transaction.atomic():
        rule = ApprovalPolicyRule.objects.select_for_update().get(
            pk=rule_id, tenant=tenant, active=True
        )
        selector = {
            "tool_name": rule.tool_name,
            "key": rule.key,
            "argument": rule.argument,
            "value": rule.value,
        }
        newest = (
            ApprovalPolicyRule.objects.filter(tenant=tenant, **selector)
            .order_by("-version")
            .values_list("version", flat=True)
            .first()
        )
        ApprovalPolicyRule.objects.filter(pk=rule.pk).update(active=False)
        tombstone = ApprovalPolicyRule.objects.create(
            tenant=tenant,
            version=(newest or rule.version) + 1,
            active=False,
            required=rule.required,
            roles=rule.roles,
            groups=rule.groups,
            users=rule.users,
            redact=rule.redact,
            created_by=created_by,
            **selector,
        )
        record(
            action="approval.policy_changed",
            actor=actor,
            tenant_id=tenant.pk,
            tenant_slug=tenant.slug,
            data={**selector, "version": tombstone.version, "deleted": True},
        )
    return tombstone


def rule_policy(rule: ApprovalPolicyRule) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "required": rule.required,
        "roles": list(rule.roles),
        "groups": list(rule.groups),
        "users": list(rule.users),
    }
    if rule.redact:
        policy["redact"] = list(rule.redact)
    return policy


def _matches(rule: ApprovalPolicyRule, arguments: dict[str, Any]) -> bool:
    if not rule.argument:
        return True
    return rule.argument in arguments and str(arguments[rule.argument]) == rule.value


def resolve(
    *, tenant_id: int, tool_name: str, key: str, arguments: dict[str, Any], default: dict[str, Any]
) -> dict[str, Any]:
    """The policy a gate applies: the tool's ``default``, or — when an active rule of the
    tenant matches (an argument-specific rule before a tool-wide one) — the rule's eligible set,
    with ``required`` never below the tool's default and ``redact`` the union of both. Carries
    ``rule`` (id, version) and ``digest`` (of the policy) for the audit trail, and
    ``binding`` (:func:`rules_digest` of the tool's matching rules, every gate key) to compare
    with the task's bound one — all from one query."""
    matching = _matching_rules(tenant_id, tool_name, arguments)
    rules = [rule for rule in matching if rule.key == key]
    policy = dict(default)
    if rules:
        rule = rules[0]
        policy.update(rule_policy(rule))
        policy["required"] = max(rule.required, int(default.get("required", 1)))
        policy["rule"] = {"id": rule.pk, "version": rule.version}
    redact = sorted(set(default.get("redact") or ()) | set(policy.get("redact") or ()))
    if redact:
        policy["redact"] = redact
    policy["digest"] = digest({k: v for k, v in policy.items() if k != "digest"})
    policy["binding"] = _digest_of(matching)
    return policy


def _matching_rules(
    tenant_id: int, tool_name: str, arguments: dict[str, Any]
) -> list[ApprovalPolicyRule]:
    """The tenant's active rules for ``tool_name`` that select a call with ``arguments``, an
    argument-specific rule before a tool-wide one (one indexed query)."""
    return [
        rule
        for rule in ApprovalPolicyRule.objects.filter(
            tenant_id=tenant_id, tool_name=tool_name, active=True
        ).order_by("key", "-argument", "id")
        if _matches(rule, arguments)
    ]


def _digest_of(rules: list[ApprovalPolicyRule]) -> str:
    """SHA-256 of the canonical JSON of the rules (selector, version, policy)."""
    return digest(
        sorted(
            (
                {
                    "key": rule.key,
                    "argument": rule.argument,
                    "value": rule.value,
                    "version": rule.version,
                    **rule_policy(rule),
                }
                for rule in rules
            ),
            key=lambda item: (item["key"], item["argument"], item["value"]),
        )
    )


def rules_digest(*, tenant_id: int, tool_name: str, arguments: dict[str, Any]) -> str:
    """The digest of the approval policy rules that apply to a call of ``tool_name`` with
    ``arguments`` in the tenant (every gate key; the digest of ``[]`` when none does)."""
    return _digest_of(_matching_rules(tenant_id, tool_name, arguments))


# ---------------------------------------------------------------- the task's binding
# Task.policy_revision is 64 characters: the tool's own revision (ToolDef.policy_revision, 32)
# and, for a tool that declares approval gates, the first 32 of its rules digest.
TOOL_REVISION_LENGTH = 32


def declares_gates(fn: Any) -> bool:
    """Does the tool function call ``ctx.approve`` itself (read from its code, once)? Only such
    tools bind the rules digest at creation: no other creation reads the rules."""
    code = getattr(fn, "__code__", None)
    return code is not None and "approve" in code.co_names


def bound_revision(tool_def: Any, *, tenant_id: int, arguments: dict[str, Any]) -> str:
    """The policy revision a new task of ``tool_def`` binds: the tool's, followed for a tool
    that declares approval gates by the digest of the approval rules that apply to it."""
    revision = str(tool_def.policy_revision)
    if not declares_gates(tool_def.fn):
        return revision
    rules = rules_digest(tenant_id=tenant_id, tool_name=tool_def.name, arguments=arguments)
    return revision[:TOOL_REVISION_LENGTH] + rules[:TOOL_REVISION_LENGTH]


def tool_revision_of(policy_revision: str) -> str:
    """The tool's part of a task's policy revision (what a resume compares with the tool)."""
    return policy_revision[:TOOL_REVISION_LENGTH]


def bound_rules_digest(policy_revision: str) -> str:
    """The approval rules part of a task's policy revision ("" when none was bound)."""
    return policy_revision[TOOL_REVISION_LENGTH:]


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
