"""Dashboard routes."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, path, register_converter
from django.urls.converters import StringConverter

from dashboard import (
    approvals,
    audit_views,
    bulk,
    destinations,
    operations_views,
    preferences,
    views,
)
from dashboard.pages import with_csp


class SegmentConverter(StringConverter):
    """A path segment that may name a row: no NUL character, which no task id or input key
    holds and PostgreSQL refuses in a query (such a path is a 404, never a 500)."""

    regex = "[^/\x00]+"


register_converter(SegmentConverter, "segment")

app_name = "dashboard"
urlpatterns: list[URLPattern | URLResolver] = [
    path(
        "login/",
        with_csp(auth_views.LoginView.as_view(redirect_authenticated_user=True)),
        name="login",
    ),
    path(
        "logout/",
        with_csp(auth_views.LogoutView.as_view(next_page="dashboard:login")),
        name="logout",
    ),
    path("", views.home, name="home"),
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/counts", views.inbox_counts, name="inbox_counts"),
    path("tenant", views.switch_tenant, name="switch_tenant"),
    path("tasks/", views.task_list, name="tasks"),
    path("tasks/bulk-cancel", bulk.bulk_cancel, name="bulk_cancel"),
    path("effects/bulk-reconcile", bulk.bulk_reconcile, name="bulk_reconcile"),
    path("tasks/<segment:task_id>/", views.task_detail, name="task"),
    path("tasks/<segment:task_id>/row", views.task_row, name="task_row"),
    path("tasks/<segment:task_id>/inputs/<segment:key>/", views.answer_input, name="answer"),
    path("tasks/<segment:task_id>/cancel", views.cancel_task, name="cancel"),
    path("tasks/<segment:task_id>/force-cancel", views.force_cancel_task, name="force_cancel"),
    path("tasks/<segment:task_id>/retry", views.retry_task, name="retry"),
    path("operations", operations_views.operations_page, name="operations"),
    path("tasks/<segment:task_id>/delegations", views.grant_delegation, name="grant"),
    path("tasks/<segment:task_id>/delegations/revoke", views.revoke_delegation, name="revoke"),
    path("effects/<int:effect_id>/reconcile", views.reconcile_effect, name="reconcile"),
    path("audit/", audit_views.audit_list, name="audit"),
    path("audit/export", audit_views.audit_export, name="audit_export"),
    path("audit/verify", audit_views.audit_verify, name="audit_verify"),
    # An event's address is its chain and its sequence number in it ("tenant:acme" #323): the
    # number alone is ambiguous across tenants, and the primary key is no address at all.
    path("audit/<segment:chain>/<int:seq>/", audit_views.audit_detail, name="audit_event"),
    path("destinations/", destinations.destination_list, name="destinations"),
    path("destinations/<int:destination_id>/", destinations.destination_detail, name="destination"),
    path(
        "destinations/<int:destination_id>/delete",
        destinations.destination_delete,
        name="destination_delete",
    ),
    path(
        "destinations/<int:destination_id>/deliveries/<int:delivery_id>/redeliver",
        destinations.delivery_redeliver,
        name="delivery_redeliver",
    ),
    path("preferences/", preferences.preferences_page, name="preferences"),
    path("tokens/", audit_views.token_list, name="tokens"),
    path("approval-policies/", approvals.approval_policies_page, name="approval_policies"),
    path("approval-policies/<int:rule_id>/", approvals.approval_rule_page, name="approval_rule"),
    path(
        "approval-policies/<int:rule_id>/delete",
        approvals.approval_rule_delete,
        name="approval_rule_delete",
    ),
    path("reviewer-groups/", approvals.reviewer_groups_create, name="reviewer_groups"),
    path("reviewer-groups/<slug:name>/", approvals.reviewer_group_page, name="reviewer_group"),
    path("tokens/<int:token_id>/revoke", audit_views.token_revoke, name="token_revoke"),
]
