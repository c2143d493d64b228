"""REST API routes (/api/v1/…, /api/schema/, /api/docs/)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from audit import api as audit_api
from mcptasks import api, api_approvals

TASK = "v1/tasks/<str:task_id>"


def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Any other path under /api/: a problem, like every error of the API."""
    return JsonResponse(
        {
            "type": "about:blank",
            "title": "Not Found",
            "status": 404,
            "detail": "No such API endpoint.",
        },
        status=404,
        content_type="application/problem+json",
    )


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
        "v1/reviewer-groups",
        api_approvals.ReviewerGroupListView.as_view(),
        name="api-reviewer-groups",
    ),
    path(
        "v1/approvals/<str:task_id>/<path:key>/decisions",
        api_approvals.ApprovalDecisionView.as_view(),
        name="api-approval-decide",
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
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^(?P<rest>[\s\S]*)$", not_found),  # [\s\S]: a path may hold a newline
]
