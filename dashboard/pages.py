"""What every dashboard page shares: the user's tenants and the current one, role-aware
navigation, the Content-Security-Policy, and rendering helpers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme

from audit.record import Actor
from mcptasks import access, queries
from mcptasks.models import Membership, Role, Task, Tenant

SESSION_TENANT = "dashboard_tenant"
# The viewer's IANA time zone, set by the page's script from the browser's: pages show times in
# it (UTC until the browser has said).
TIME_ZONE_COOKIE = "mcptasks_tz"

# No inline script or style anywhere: the page loads only its own static files.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def with_csp(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Send the dashboard's Content-Security-Policy with the view's responses."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    return wrapped


# What a dashboard response depends on besides its URL and the session: a view answers an htmx
# request (``HX-Request``, aimed at ``HX-Target``) with a fragment of the page, anything else —
# a navigation, a reload, Back/Forward, htmx restoring history — with the whole page.
VARY_ON = ("HX-Request", "HX-Target", "HX-History-Restore-Request")


def cache_headers(response: HttpResponseBase) -> HttpResponseBase:
    """Per-user pages that the browser's cache must never hand to another kind of request:
    vary on the htmx headers; private and revalidated (fragments set ``no-store`` themselves,
    so Back, Forward or a shared link never replay one as a page)."""
    patch_vary_headers(response, VARY_ON)
    if "Cache-Control" not in response.headers:
        patch_cache_control(response, private=True, no_cache=True)
    return response


def _zone(name: str) -> ZoneInfo | None:
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def browser_time_zone(request: HttpRequest) -> ZoneInfo | None:
    """The time zone the viewer's browser reported, if it is a real one."""
    return _zone(request.COOKIES.get(TIME_ZONE_COOKIE, ""))


def profile_time_zone(request: HttpRequest) -> ZoneInfo | None:
    """The time zone the user chose on their preferences page (one query, once per request),
    or None when they follow their browser's."""
    if not hasattr(request, "_dashboard_profile_tz"):
        from dashboard.models import Preference

        user = getattr(request, "user", None)
        name = (
            Preference.objects.filter(user_id=user.pk).values_list("time_zone", flat=True).first()
            if user is not None and user.is_authenticated
            else None
        )
        request._dashboard_profile_tz = _zone(name or "")  # type: ignore[attr-defined]
    return request._dashboard_profile_tz  # type: ignore[attr-defined,no-any-return]


def viewer_time_zone(request: HttpRequest) -> ZoneInfo | None:
    """The zone pages write times in: the user's profile setting, else their browser's."""
    return profile_time_zone(request) or browser_time_zone(request)


def page(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """A signed-in dashboard page: login required, CSP and cache headers sent, times in the
    viewer's time zone."""
    secured = with_csp(login_required(view))

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with timezone.override(viewer_time_zone(request)):
            return cache_headers(secured(request, *args, **kwargs))

    return wrapped


@dataclass
class TenantChoice:
    tenant: Tenant
    roles: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.tenant.name} ({', '.join(self.roles)})" if self.roles else self.tenant.name


def tenant_choices(request: HttpRequest) -> list[TenantChoice]:
    """The tenants the user belongs to (every tenant for a staff operator), cached per request."""
    cached = getattr(request, "_dashboard_tenants", None)
    if cached is not None:
        return list(cached)
    user = request.user
    choices: dict[int, TenantChoice] = {}
    for membership in (
        Membership.objects.filter(user_id=user.pk or 0)
        .select_related("tenant")
        .order_by("tenant__name", "role")
    ):
        choices.setdefault(membership.tenant_id, TenantChoice(membership.tenant)).roles.append(
            membership.role
        )
    if access.tenants_where(user, access.Action.VIEW) is None:
        for tenant in Tenant.objects.exclude(pk__in=list(choices)).order_by("name"):
            choices[tenant.pk] = TenantChoice(tenant, ["staff operator"])
    result = sorted(choices.values(), key=lambda choice: choice.tenant.name)
    request._dashboard_tenants = result  # type: ignore[attr-defined]
    return list(result)


def current_tenant(request: HttpRequest) -> Tenant | None:
    """The tenant the user works in (the switcher's choice, else their first)."""
    choices = tenant_choices(request)
    slug = request.session.get(SESSION_TENANT)
    for choice in choices:
        if choice.tenant.slug == slug:
            return choice.tenant
    return choices[0].tenant if choices else None


@dataclass(frozen=True)
class Scope:
    """The tenant a page shows: one of the user's, or all of them (``tenant`` None)."""

    tenant: Tenant | None
    error: str = ""

    @property
    def tenant_id(self) -> int | None:
        return self.tenant.pk if self.tenant is not None else None

    @property
    def param(self) -> str:
        """The scope as the ``tenant`` parameter of a URL ("" for every tenant)."""
        return self.tenant.slug if self.tenant is not None else ""


def scope_of(request: HttpRequest, params: Any) -> Scope:
    """The tenant scope of a page: its ``tenant`` parameter ("" for all the user's tenants)
    when the URL has one, else the tenant switcher's — the same rule on every page."""
    if "tenant" not in params:
        return Scope(current_tenant(request))
    slug = params.get("tenant") or ""
    if not slug:
        return Scope(None)
    for choice in tenant_choices(request):
        if choice.tenant.slug == slug:
            return Scope(choice.tenant)
    return Scope(None, error=f"You work in no tenant {slug!r}.")


def _counts_by_tenant(request: HttpRequest) -> dict[int, queries.InboxCounts]:
    cached = getattr(request, "_dashboard_counts", None)
    if cached is None:
        cached = queries.inbox_counts_by_tenant(request.user)
        request._dashboard_counts = cached  # type: ignore[attr-defined]
    return cached


def scope_counts(request: HttpRequest, tenant: Tenant | None) -> queries.InboxCounts:
    """What waits on the user in ``tenant`` (every tenant when None): the inbox badge."""
    counts = _counts_by_tenant(request)
    chosen = (
        list(counts.values())
        if tenant is None
        else [c for t, c in counts.items() if t == tenant.pk]
    )
    return queries.InboxCounts(
        inputs=sum(c.inputs for c in chosen),
        unknown_effects=sum(c.unknown_effects for c in chosen),
        stuck_cancels=sum(c.stuck_cancels for c in chosen),
    )


def waiting_elsewhere(request: HttpRequest, tenant: Tenant | None) -> int:
    """How much waits on the user outside ``tenant`` (so that a scope never hides work)."""
    if tenant is None:
        return 0
    return sum(c.total for t, c in _counts_by_tenant(request).items() if t != tenant.pk)


def nav_context(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    choices = tenant_choices(request)
    tenant = current_tenant(request)
    roles = next((c.roles for c in choices if tenant and c.tenant.pk == tenant.pk), [])
    audit = access.audit_tenants(user)
    tokens_admin = access.token_admin_tenants(user)
    return {
        "nav_tenants": choices,
        "nav_tenant": tenant,
        "nav_roles": roles,
        "nav_may_audit": audit is None or bool(audit),
        "nav_tokens_admin": tokens_admin is None or bool(tokens_admin),
        "nav_manage_approvals": tenant is not None
        and bool(access.may_manage_approvals(user, tenant.pk)),
        "nav_may_operate": bool(access.operations_tenants(user)),
        "nav_destinations": bool(access.destination_tenants(user)),
        "nav_counts": scope_counts(request, tenant),
        # The user chose a zone: the page's script must not rewrite times in the browser's.
        "nav_tz_profile": profile_time_zone(request) is not None,
    }


def render_page(
    request: HttpRequest, template: str, context: dict[str, Any] | None = None, status: int = 200
) -> HttpResponse:
    """Render a full page, navigation included."""
    full = {**nav_context(request), **(context or {})}
    return render(request, template, full, status=status)


def wants_fragment(request: HttpRequest, target: str) -> bool:
    """An htmx swap of the element ``target`` (filters, pager) — not htmx restoring history,
    which needs the whole page."""
    htmx = getattr(request, "htmx", None)
    if not htmx:
        return False
    return bool(htmx.target == target and not htmx.history_restore_request)


def render_fragment(
    request: HttpRequest, template: str, context: dict[str, Any] | None = None
) -> HttpResponse:
    """Render a piece of a page (live updates, htmx swaps) without the navigation's queries."""
    audit = access.audit_tenants(request.user)
    response = render(
        request, template, {"nav_may_audit": audit is None or bool(audit), **(context or {})}
    )
    patch_cache_control(response, private=True, no_store=True)
    return response


def denied(request: HttpRequest, reason: str, *, title: str = "Not permitted") -> HttpResponse:
    """A visible object, an action the user may not take: 403 with the reason."""
    return render_page(
        request, "dashboard/denied.html", {"title": title, "reason": reason}, status=403
    )


def start_url_name(user: Any) -> str:
    """Where a user's work is: operators on the inbox; auditors (and nothing else) on the audit
    trail; members and tenant admins on their tasks, or on the inbox while it holds something
    for them (an approval they were named for, a question of their own task)."""
    roles = set().union(*access.roles(user).values())
    if Role.OPERATOR in roles:
        return "dashboard:inbox"
    if roles == {Role.AUDITOR}:
        return "dashboard:audit"
    if access.answerable_inputs(user).exists():
        return "dashboard:inbox"
    return "dashboard:tasks"


def safe_next(request: HttpRequest, target: str, default: str) -> str:
    """``target`` if it is a path on this site (not ``//host`` nor ``/\\host``), else ``default``."""
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def may_bulk(request: HttpRequest) -> bool:
    """Operators (of any tenant) get the bulk actions: cancel tasks, reconcile effects."""
    return access.tenants_where(request.user, access.Action.FORCE_CANCEL) != []


def actor_for(user: Any, task: Task | None = None, *, tenant_id: int | None = None) -> Actor:
    """The audit actor of a dashboard user: :func:`access.actor` on the ``dashboard`` channel
    (the one rule of every channel: ``operator`` when acting with operator rights)."""
    return access.actor(user, "dashboard", task, tenant_id=tenant_id)


def task_for(
    request: HttpRequest, task_id: Any, action: access.Action = access.Action.VIEW
) -> tuple[Task, HttpResponse | None]:
    """:func:`access.task_for` for a dashboard view, with what the task page shows of its
    relations: the task and, when ``action`` is refused, the 403 page to answer with; a task
    the user may not see is a 404 (and a miss against their lookup budget)."""
    try:
        task = access.task_for(request.user, task_id, action, related=queries.DETAIL_RELATED)
    except access.TaskHidden:
        raise Http404("No such task") from None
    except access.Refused as refused:
        return refused.task, denied(request, refused.decision.reason)
    return task, None
