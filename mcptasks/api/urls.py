"""REST API routes (/api/v1/…, /api/schema/, /api/docs/ (Swagger UI), /api/redoc/)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, path, re_path
from django.utils.csp import CSP
from django.views.decorators.csp import csp_override
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from audit import api as audit_api
from mcptasks import errors
from mcptasks.api import approvals as api_approvals
from mcptasks.api import destinations as api_destinations
from mcptasks.api import views as api

TASK = "v1/tasks/<str:task_id>"

# ReDoc (styled-components) writes its styles into <style> elements: the ones it creates at
# render carry this response's nonce; two it creates as the bundle loads, before any nonce can
# reach it, are allowed by hash (an empty element, filled through the CSSOM, and its fixed
# scrollbar CSS). A new ReDoc build may change them: tests/browser/test_api_docs.py then fails.
REDOC_STYLE_HASHES = [
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",
    "'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc='",
]
REDOC_CSP: dict[str, Any] = {
    **settings.SECURE_CSP,
    "style-src": [CSP.SELF, CSP.NONCE, *REDOC_STYLE_HASHES],
}


@csrf_exempt  # it changes nothing: any method gets the JSON 404, never the "form expired" page
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Any other path (and method) under /api/: a problem, like every error of the API."""
    return errors.api_not_found()


urlpatterns: list[URLPattern | URLResolver] = [
    path("v1/tasks", api.TaskListView.as_view(), name="api-tasks"),
    path(TASK, api.TaskDetailView.as_view(), name="api-task"),
    path(
        f"{TASK}/input-requests/<path:key>/answer",
        api.TaskAnswerInputView.as_view(),
        name="api-task-answer",
    ),
    path(f"{TASK}/cancel", api.TaskCancelView.as_view(), name="api-task-cancel"),
    path(f"{TASK}/force-cancel", api.TaskForceCancelView.as_view(), name="api-task-force-cancel"),
    path(
        f"{TASK}/effects/<str:effect_id>/reconcile",
        api.TaskReconcileEffectView.as_view(),
        name="api-task-reconcile",
    ),
    path(f"{TASK}/delegations/grant", api.TaskGrantDelegationView.as_view(), name="api-task-grant"),
    path(
        f"{TASK}/delegations/revoke", api.TaskRevokeDelegationView.as_view(), name="api-task-revoke"
    ),
    path("v1/approvals", api_approvals.ApprovalListView.as_view(), name="api-approvals"),
    path(
        "v1/approval-policies",
        api_approvals.ApprovalPolicyListView.as_view(),
        name="api-approval-policies",
    ),
    path(
        "v1/approval-policies/<int:rule_id>",
        api_approvals.ApprovalPolicyDetailView.as_view(),
        name="api-approval-policy",
    ),
    path(
        "v1/reviewer-groups",
        api_approvals.ReviewerGroupListView.as_view(),
        name="api-reviewer-groups",
    ),
    path(
        "v1/approvals/<str:task_id>/<path:key>/decisions",
        api_approvals.ApprovalDecisionView.as_view(),
        name="api-approval-decide",
    ),
    path(
        "v1/destinations", api_destinations.DestinationListView.as_view(), name="api-destinations"
    ),
    path(
        "v1/destinations/<int:destination_id>",
        api_destinations.DestinationDetailView.as_view(),
        name="api-destination",
    ),
    path(
        "v1/destinations/<int:destination_id>/deliveries",
        api_destinations.DeliveryListView.as_view(),
        name="api-destination-deliveries",
    ),
    path(
        "v1/destinations/<int:destination_id>/deliveries/<int:delivery_id>/redeliver",
        api_destinations.RedeliverView.as_view(),
        name="api-destination-redeliver",
    ),
    path("v1/audit/events", audit_api.AuditEventListView.as_view(), name="api-audit-events"),
    path("v1/audit/exports", audit_api.AuditExportCreateView.as_view(), name="api-audit-exports"),
    path(
        "v1/audit/exports/<str:export_id>/file",
        audit_api.AuditExportFileView.as_view(),
        name="api-audit-export-file",
    ),
    path(
        "v1/audit/exports/<str:export_id>/manifest",
        audit_api.AuditExportManifestView.as_view(),
        name="api-audit-export-manifest",
    ),
    path("v1/tokens", api.TokenListView.as_view(), name="api-tokens"),
    path("v1/tokens/issue", api.TokenIssueView.as_view(), name="api-tokens-issue"),
    path("v1/tokens/<str:token_id>/revoke", api.TokenRevokeView.as_view(), name="api-token-revoke"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view loads its start-up script from a URL: no inline script for the CSP to block.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="api/swagger_ui.html"
        ),
        name="api-docs",
    ),
    path(
        "redoc/",
        csp_override(REDOC_CSP)(
            SpectacularRedocView.as_view(url_name="api-schema", template_name="api/redoc.html")
        ),
        name="api-redoc",
    ),
    re_path(r"^(?P<rest>[\s\S]*)$", not_found),  # [\s\S]: a path may hold a newline
]
