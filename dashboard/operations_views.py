"""The operations page (issue 22): workers, queues, throughput and leases, for operators."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from dashboard.pages import denied, page, render_page
from mcptasks import access, operations


@page
def operations_page(request: HttpRequest) -> HttpResponse:
    tenant_ids = access.operations_tenants(request.user)
    if not tenant_ids:
        return denied(request, "the operations page is for operators")
    return render_page(
        request,
        "dashboard/operations.html",
        {"ops": operations.snapshot(tenant_ids), "all_tenants": tenant_ids is None},
    )
