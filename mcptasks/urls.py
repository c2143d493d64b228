from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from mcptasks import health, oauth

handler404 = "mcptasks.errors.page_not_found"
handler500 = "mcptasks.errors.server_error"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("metrics", health.metrics),
    path(".well-known/oauth-protected-resource", oauth.protected_resource_metadata),
    path(".well-known/oauth-protected-resource/mcp", oauth.protected_resource_metadata),
    path("api/", include("mcptasks.api.urls")),
    path("", include("dashboard.urls")),
]
