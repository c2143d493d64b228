"""REST API of the audit trail (/api/v1/audit/): the events list and exports.

An export is created once (``POST /audit/exports``): the events are streamed through the
digest, the ``audit.exported`` event is recorded and the signed manifest returned, with a
signed, expiring handle. The handle pins the chain heads of that moment, so the file
(``GET …/file``) streams exactly the bytes the manifest describes, and ``GET …/manifest``
rebuilds the same signed manifest (Ed25519 signatures are deterministic) — nothing is stored
and any web process can serve either. Both stream with constant memory (audit.export).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core import signing as django_signing
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from audit import signing
from audit.chain import SYSTEM_CHAIN, chain_for_tenant
from audit.export import ExportFilters, ExportStream, finish_export
from audit.filters import AuditEventFilter, AuditEventPagination
from audit.serializers import AuditEventSerializer, ExportInputSerializer, ExportSerializer
from mcptasks import access
from mcptasks.restkit.errors import problems
from mcptasks.restkit.permissions import READ_AUDIT, AuditScope
from mcptasks.restkit.views import ApiListView, ApiView, actor_of, caller_tenant, list_schema, parse

HANDLE_SALT = "mcptasks.audit.api.export"
HANDLE_MAX_AGE_S = 24 * 3600
ALL_CHAINS = "*"
MEDIA_TYPES = {
    "jsonl": "application/jsonl",
    "csv": "text/csv; charset=utf-8",
    "ocsf": "application/jsonl",
}
SUFFIXES = {"ocsf": "ocsf.jsonl"}


@list_schema(
    "audit_events_list",
    "audit",
    "List audit events",
    "Events of the chains the caller reads (auditors, admins and operators of a tenant; staff "
    "operators read every chain), newest first, redacted when recorded, with their hash-chain "
    "fields.",
    AuditEventSerializer,
)
class AuditEventListView(ApiListView):
    """Audit events of the chains the caller may read, newest first."""

    access_rule = READ_AUDIT
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    pagination_class = AuditEventPagination

    def get_queryset(self) -> Any:
        return access.visible_audit_events(self.request.user)


def _scope(request: Request, data: dict[str, Any]) -> tuple[str, AuditScope]:
    """The chain an export reads (``""`` for every chain) and whose right it needs."""
    chain, slug = data.get("chain"), data.get("tenant")
    if chain in (ALL_CHAINS, SYSTEM_CHAIN):
        if slug:
            raise ValidationError({"tenant": [f"Not with chain {chain!r}."]})
        return ("" if chain == ALL_CHAINS else SYSTEM_CHAIN), AuditScope(tenant_id=None)
    if chain is not None:
        if not chain.startswith("tenant:") or not chain.removeprefix("tenant:"):
            raise ValidationError({"chain": ['Use "tenant:<slug>", "system" or "*".']})
        if slug and chain_for_tenant(slug) != chain:
            raise ValidationError({"tenant": ["Names another tenant than chain."]})
        slug = chain.removeprefix("tenant:")
    tenant = caller_tenant(request, slug)
    return chain_for_tenant(tenant.slug), AuditScope(tenant_id=tenant.pk)


def _links(request: Request, handle: str) -> dict[str, str]:
    return {
        "file": request.build_absolute_uri(reverse("api-audit-export-file", args=[handle])),
        "manifest_url": request.build_absolute_uri(
            reverse("api-audit-export-manifest", args=[handle])
        ),
    }


class AuditExportCreateView(ApiView):
    @extend_schema(
        operation_id="audit_exports_create",
        tags=["audit"],
        summary="Export audit events",
        description="Exports the events of one chain (the caller's tenant by default) matching "
        "the filters, records the audit.exported event, and returns the signed "
        "manifest with links to download the file and the manifest. Verify with "
        "`manage.py verify_export FILE MANIFEST`.",
        request=ExportInputSerializer,
        responses={201: ExportSerializer, **problems(400, 403, 404, 422)},
    )
    def post(self, request: Request) -> Response:
        data = parse(ExportInputSerializer, request)
        chain, scope = _scope(request, data)
        self.check_object_permissions(request, scope)
        if data["since"] and data["until"] and data["since"] >= data["until"]:
            raise ValidationError({"until": ["Must be later than since."]})
        filters = ExportFilters(
            chain=chain,
            actor=data["actor"],
            action=data["action"],
            task_id=data["task_id"],
            since=data["since"],
            until=data["until"],
        )
        stream = ExportStream(filters=filters, format=data["format"])
        for _chunk in stream:
            pass  # the digest and counts, with constant memory; the bytes are served later
        manifest = finish_export(stream, actor=actor_of(request))
        handle = django_signing.dumps(
            {
                "user": request.user.pk,
                "tenant_id": scope.tenant_id,
                "format": stream.format,
                "filters": filters.as_dict(),
                "heads": stream.heads,
                "created_at": manifest["created_at"],
                "export_event": manifest["export_event"],
            },
            salt=HANDLE_SALT,
            compress=True,
        )
        links = _links(request, handle)
        body = {
            "id": handle,
            "format": stream.format,
            "count": stream.count,
            "content_sha256": stream.sha256,
            **links,
            "manifest": manifest,
        }
        return Response(
            ExportSerializer(body).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": links["file"]},
        )


class _ExportHandleView(ApiView):
    def snapshot(self, request: Request, export_id: str) -> tuple[dict[str, Any], ExportStream]:
        """The export a handle names, as a stream pinned to its chain heads; 404 for a bad,
        expired or someone else's handle, 403 if the caller no longer reads the chain."""
        try:
            handle = django_signing.loads(export_id, salt=HANDLE_SALT, max_age=HANDLE_MAX_AGE_S)
        except django_signing.BadSignature:
            handle = None
        if not isinstance(handle, dict) or handle.get("user") != request.user.pk:
            raise NotFound("Export not found, or its handle expired: create it again.")
        self.check_object_permissions(request, AuditScope(tenant_id=handle["tenant_id"]))
        stream = ExportStream(
            filters=ExportFilters.from_dict(handle["filters"]), format=handle["format"]
        )
        stream.heads = handle["heads"]
        return handle, stream


class AuditExportFileView(_ExportHandleView):
    @extend_schema(
        operation_id="audit_exports_file",
        tags=["audit"],
        summary="Download an export's file",
        description="Streams the exported events (JSON Lines or CSV) exactly as the manifest "
        "describes them.",
        responses={
            (200, "application/jsonl"): OpenApiResponse(OpenApiTypes.STR, description="JSON Lines"),
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV"),
            **problems(403, 404),
        },
    )
    def get(self, request: Request, export_id: str) -> StreamingHttpResponse:
        handle, stream = self.snapshot(request, export_id)
        stamp = handle["created_at"][:19].replace(":", "").replace("-", "")
        response = StreamingHttpResponse(
            _chunks_for(request, iter(stream)), content_type=MEDIA_TYPES[stream.format]
        )
        response["Content-Disposition"] = (
            f'attachment; filename="audit-export-{stamp}.{SUFFIXES.get(stream.format, stream.format)}"'
        )
        response["Cache-Control"] = "no-store"
        return response


class AuditExportManifestView(_ExportHandleView):
    @extend_schema(
        operation_id="audit_exports_manifest",
        tags=["audit"],
        summary="Download an export's signed manifest",
        description="The signed manifest (filters, count, first/last sequence per chain, "
        "SHA-256 of the file, chain heads, the audit.exported event), the same "
        "as the one returned when the export was created.",
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="Signed manifest"),
            **problems(403, 404),
        },
    )
    def get(self, request: Request, export_id: str) -> Response:
        handle, stream = self.snapshot(request, export_id)
        for _chunk in stream:
            pass
        body = stream.manifest_body()
        body["created_at"] = handle["created_at"]
        body["export_event"] = handle["export_event"]
        return Response(signing.sign(body), headers={"Cache-Control": "no-store"})


def _chunks_for(
    request: Request, chunks: Iterator[bytes]
) -> Iterator[bytes] | AsyncIterator[bytes]:
    """Under ASGI, an async iterator that pulls one chunk at a time (Django would read a sync
    iterator whole into memory there); under WSGI, the chunks as they are."""
    if isinstance(request._request, ASGIRequest):
        return _pull(chunks)
    return chunks


async def _pull(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    # thread_sensitive: every chunk is read on the request's thread, with its connection.
    next_chunk = sync_to_async(lambda: next(chunks, None), thread_sensitive=True)
    while (chunk := await next_chunk()) is not None:
        yield chunk
