"""Dashboard audit pages (events list, detail, export with manifest, chain verification) and
the API tokens page. Auditors, operators and tenant admins read the audit trail of their own
tenants (``access.audit_tenants``); events are shown as stored — redacted when recorded."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from audit import chain as audit_chain
from audit.export import ExportFilters, ExportStream, dump_manifest, finish_export, verify_export
from audit.models import ChainHead
from audit.seal import seal_bound_s
from dashboard import forms
from dashboard.filter_disclosure import disclosure
from dashboard.pages import (
    actor_for,
    current_tenant,
    denied,
    page,
    render_fragment,
    render_page,
    tenant_choices,
    wants_fragment,
)
from mcptasks import access, queries, tokens
from mcptasks.models import Tenant

User = get_user_model()
ALL_TENANTS = "*"


# ---------------------------------------------------------------- which tenants
def _audit_tenant_choices(request: HttpRequest) -> list[tuple[str, str]]:
    """(slug, name) of the tenants whose audit trail the user reads; ``*`` for all of them."""
    readable = access.audit_tenants(request.user)
    choices = [
        (c.tenant.slug, c.tenant.name)
        for c in tenant_choices(request)
        if readable is None or c.tenant.pk in readable
    ]
    return [(ALL_TENANTS, "All my tenants"), *choices] if choices else []


def _tenant_by_slug(slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first() if slug and slug != ALL_TENANTS else None


def _default_audit_tenant(request: HttpRequest, choices: list[tuple[str, str]]) -> str:
    """The tenant the audit list shows unless told: the switcher's, else the last readable."""
    tenant = current_tenant(request)
    slugs = [slug for slug, _ in choices]
    return tenant.slug if tenant and tenant.slug in slugs else slugs[-1]


def _audit_filters(
    request: HttpRequest, params: Any
) -> tuple[forms.AuditFilterForm, queries.AuditFilters | None, Tenant | None]:
    """The filter form over ``params`` (GET, or the export's POST) and what it filters."""
    choices = _audit_tenant_choices(request)
    data = params.copy()
    if "tenant" not in data and choices:
        data["tenant"] = _default_audit_tenant(request, choices)
    form = forms.AuditFilterForm(data, tenants=choices)
    if not choices or not form.is_valid():
        return form, None, None
    cleaned = form.cleaned_data
    tenant = _tenant_by_slug(cleaned["tenant"])
    return (
        form,
        queries.AuditFilters(
            tenant_id=tenant.pk if tenant else None,
            actor=cleaned["actor"].strip(),
            action=cleaned["action"].strip(),
            task_id=cleaned["task"].strip(),
            since=cleaned["since"],
            until=cleaned["until"],
        ),
        tenant,
    )


def _require_audit(request: HttpRequest) -> HttpResponse | None:
    readable = access.audit_tenants(request.user)
    if readable is not None and not readable:
        return denied(request, "the audit trail is for auditors, operators and tenant admins")
    return None


# ---------------------------------------------------------------- list, detail
@page
@require_GET
def audit_list(request: HttpRequest) -> HttpResponse:
    refusal = _require_audit(request)
    if refusal is not None:
        return refusal
    form, filters, _ = _audit_filters(request, request.GET)
    result = (
        queries.audit_page(
            request.user,
            filters,
            older_than=request.GET.get("older"),
            newer_than=request.GET.get("newer"),
        )
        if filters is not None
        else queries.Page(rows=[])
    )
    tenants = {tenant.pk: tenant for tenant in Tenant.objects.all()}
    choices = _audit_tenant_choices(request)
    fragment = wants_fragment(request, "audit-results")
    context = {
        "form": form,
        "page": result,
        "tenants": tenants,
        "actions": queries.AUDIT_ACTIONS,
        "filters": disclosure(
            form,
            request.GET,
            defaults={"tenant": _default_audit_tenant(request, choices) if choices else ""},
        ),
        "filters_oob": fragment,  # the swap also updates the summary's "N active"
    }
    if fragment:
        return render_fragment(request, "dashboard/_audit_results.html", context)
    return render_page(request, "dashboard/audit_list.html", context)


@page
@require_GET
def audit_detail(request: HttpRequest, chain: str, seq: int) -> HttpResponse:
    event = queries.audit_event(request.user, chain, seq)
    if event is None:
        raise Http404("No such event")
    task_visible = bool(event.task_id)
    if task_visible:
        try:
            access.task_for(request.user, event.task_id)
        except access.TaskHidden:
            task_visible = False
    return render_page(
        request,
        "dashboard/audit_detail.html",
        {
            "event": event,
            "task_visible": task_visible,
            "tenant": Tenant.objects.filter(pk=event.tenant_id).first()
            if event.tenant_id
            else None,
            "data_json": json.dumps(event.data, indent=2, ensure_ascii=False, sort_keys=True),
        },
    )


# ---------------------------------------------------------------- export
class _Sink(io.RawIOBase):
    """A write-only, unseekable buffer that a zip archive streams into, drained chunk by chunk."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._chunks.append(chunk)
        self._position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._position

    def take(self) -> bytes:
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data


def export_archive(stream: ExportStream, *, name: str, actor: Any) -> Iterator[bytes]:
    """A zip of the export and its signed manifest, streamed with constant memory: the events
    first, then the manifest (known once the events are written, with the ``audit.exported``
    event it names)."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open(f"{name}.{stream.format}", "w", force_zip64=True) as entry:
            for chunk in stream:
                entry.write(chunk)
                if data := sink.take():
                    yield data
        manifest = finish_export(stream, actor=actor)
        archive.writestr(f"{name}.{stream.format}.manifest.json", dump_manifest(manifest))
    yield sink.take()


async def _in_thread(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    """Serve a synchronous (database-reading) iterator from ASGI without buffering it whole."""
    iterator = iter(chunks)

    def step() -> bytes | None:
        return next(iterator, None)

    while (chunk := await sync_to_async(step, thread_sensitive=True)()) is not None:
        yield chunk


@page
def audit_export(request: HttpRequest) -> HttpResponseBase:
    """GET: the export form with the list's filters; POST: the zip (events + manifest)."""
    refusal = _require_audit(request)
    if refusal is not None:
        return refusal
    form, filters, tenant = _audit_filters(
        request, request.POST if request.method == "POST" else request.GET
    )
    export_form = forms.ExportForm(request.POST if request.method == "POST" else None)
    context = {"form": form, "export_form": export_form}
    if request.method != "POST":
        return render_page(request, "dashboard/audit_export.html", context)
    if filters is None or not export_form.is_valid():
        return render_page(request, "dashboard/audit_export.html", context, status=422)
    if tenant is None and access.audit_tenants(request.user) is not None:
        messages.error(
            request,
            "Choose one tenant to export: an export holds one chain, or "
            "all of them for a staff operator.",
        )
        return render_page(request, "dashboard/audit_export.html", context, status=422)
    if tenant is not None and not access.may_read_audit(request.user, tenant.pk):
        raise Http404("No such tenant")
    export_filters = ExportFilters(
        chain=audit_chain.chain_for_tenant(tenant.slug) if tenant else "",
        actor=filters.actor,
        action=filters.action,
        task_id=filters.task_id,
        since=filters.since,
        until=filters.until,
    )
    stream = ExportStream(filters=export_filters, format=export_form.cleaned_data["format"])
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    name = f"audit-{tenant.slug if tenant else 'all'}-{stamp}"
    chunks = export_archive(stream, name=name, actor=actor_for(request.user))
    response = StreamingHttpResponse(_in_thread(chunks), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{name}.zip"'
    response["Cache-Control"] = "no-store"
    return response


# ---------------------------------------------------------------- verify
def _readable_chains(request: HttpRequest) -> list[str]:
    readable = access.audit_tenants(request.user)
    if readable is None:
        return audit_chain.known_chains()
    slugs = Tenant.objects.filter(pk__in=readable).order_by("slug").values_list("slug", flat=True)
    return [audit_chain.chain_for_tenant(slug) for slug in slugs]


@page
def audit_verify(request: HttpRequest) -> HttpResponse:
    """Each readable chain's head; POST verifies chains (``chain``) or an uploaded export."""
    refusal = _require_audit(request)
    if refusal is not None:
        return refusal
    chains = _readable_chains(request)
    heads = {
        chain: (seq, digest, updated)
        for chain, seq, digest, updated in ChainHead.objects.filter(chain__in=chains).values_list(
            "chain", "seq", "hash", "updated_at"
        )
    }
    reports: dict[str, audit_chain.ChainReport] = {}
    export_check = None
    status = 200
    if request.method == "POST":
        too_large = _upload_too_large(request)
        if too_large is not None:
            export_check, status = {"ok": False, "problems": [too_large]}, 413
        elif "archive" in request.FILES:
            export_check = _verify_archive(request.FILES["archive"], request)
        else:
            wanted = request.POST.getlist("chain") or chains
            for chain in wanted:
                if chain not in chains:
                    raise Http404("No such chain")
            reports = {report.chain: report for report in audit_chain.verify_chains(wanted)}
    rows = [
        {
            "chain": chain,
            "head": heads.get(chain),
            "report": reports.get(chain),
            "late": chain in reports and reports[chain].late(seal_bound_s()),
        }
        for chain in chains
    ]
    return render_page(
        request,
        "dashboard/audit_verify.html",
        {
            "rows": rows,
            "export_check": export_check,
            "verified_at": timezone.now() if reports else None,
        },
        status=status,
    )


# A manifest is a few KiB and an exported row is bounded by MCPTASKS_AUDIT_MAX_DATA_BYTES: far
# longer ones are not an export, and are refused before they are held in memory.
MAX_MANIFEST_BYTES = 1_048_576
MAX_ROW_BYTES = 1_048_576


def _upload_too_large(request: HttpRequest) -> str | None:
    """Why the upload is refused unread (its declared size is over the limit), or None."""
    limit = settings.MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES
    declared = request.META.get("CONTENT_LENGTH") or "0"
    size = int(declared) if declared.isascii() and declared.isdigit() else 0
    if size > limit:
        return (
            f"the upload is {size} bytes; the limit is {limit} "
            "(MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES)"
        )
    return None


class _BoundedRows:
    """The export's lines, each at most :data:`MAX_ROW_BYTES` (else ValueError)."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        while line := self.data.readline(MAX_ROW_BYTES + 1):
            if len(line) > MAX_ROW_BYTES:
                raise ValueError(f"a row is longer than {MAX_ROW_BYTES} bytes")
            yield line


def _archive_members(archive: zipfile.ZipFile) -> tuple[str, str]:
    """The manifest's and the data file's names, their declared sizes within the limits
    (zipfile reads no more than a member declares, so the declared sizes bound the work)."""
    manifest_name = next(n for n in archive.namelist() if n.endswith(".manifest.json"))
    data_name = manifest_name.removesuffix(".manifest.json")
    manifest_info, data_info = archive.getinfo(manifest_name), archive.getinfo(data_name)
    limit = settings.MCPTASKS_AUDIT_VERIFY_MAX_UNCOMPRESSED_BYTES
    if manifest_info.file_size > MAX_MANIFEST_BYTES:
        raise ValueError(f"the manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    if manifest_info.file_size + data_info.file_size > limit:
        raise ValueError(
            f"it unpacks to more than {limit} bytes (MCPTASKS_AUDIT_VERIFY_MAX_UNCOMPRESSED_BYTES)"
        )
    return manifest_name, data_name


def _verify_archive(upload: Any, request: HttpRequest) -> dict[str, Any]:
    """Verify an export zip made by :func:`audit_export` (events + manifest), within the
    upload and unpacked-size limits."""
    limit = settings.MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES
    if upload.size > limit:
        return {"ok": False, "problems": [f"the upload is larger than {limit} bytes"]}
    try:
        with zipfile.ZipFile(upload) as archive:
            manifest_name, data_name = _archive_members(archive)
            manifest = json.loads(archive.read(manifest_name))
            export_chain = (manifest.get("filters") or {}).get("chain") or ""
            tenants = access.audit_tenants(request.user)
            if tenants is not None and export_chain not in _readable_chains(request):
                return {"ok": False, "problems": ["this export is of a chain you may not read"]}
            with archive.open(data_name) as data:
                check = verify_export(_BoundedRows(data), manifest)  # type: ignore[arg-type]
    except (zipfile.BadZipFile, StopIteration, KeyError, ValueError) as exc:
        return {"ok": False, "problems": [f"not an export archive: {exc}"]}
    return {
        "ok": check.ok,
        "problems": check.problems,
        "notes": check.notes,
        "count": check.count,
        "key_id": check.key_id,
        "name": getattr(upload, "name", ""),
    }


# ---------------------------------------------------------------- API tokens
def _token_owners(request: HttpRequest, tenant: Tenant | None) -> list[tuple[str, str]]:
    if tenant is None:
        return []
    members = (
        User.objects.filter(memberships__tenant=tenant)
        .distinct()
        .order_by("username")
        .values_list("pk", "username")
    )
    return [(str(pk), username) for pk, username in members]


@page
def token_list(request: HttpRequest) -> HttpResponse:
    """The user's tokens and those of tenants they administer; admins and operators issue."""
    user = request.user
    tenant = current_tenant(request)
    may_issue = tenant is not None and bool(
        access.may_issue_token(user, tenant_id=tenant.pk, owner=user)
    )
    owners = _token_owners(request, tenant) if may_issue else []
    issue_form = forms.TokenIssueForm(
        request.POST if request.method == "POST" else None,
        owners=owners,
        initial={"owner": str(user.pk)},
    )
    issued = None
    status = 200
    if request.method == "POST":
        if not may_issue or tenant is None:
            return denied(request, "only the tenant's admins and operators issue tokens")
        if issue_form.is_valid():
            owner = User.objects.get(pk=int(issue_form.cleaned_data["owner"]))
            allowed = access.may_issue_token(user, tenant_id=tenant.pk, owner=owner)
            if not allowed:
                return denied(request, allowed.reason)
            days = issue_form.cleaned_data["expires_in_days"]
            token, plaintext = tokens.issue_token(
                user=owner,
                tenant=tenant,
                issued_by=user,
                actor=actor_for(user),
                name=issue_form.cleaned_data["name"],
                scopes=issue_form.cleaned_data["scopes"],
                expires_at=timezone.now() + timedelta(days=days) if days else None,
            )
            issued = {"token": token, "plaintext": plaintext}
            issue_form = forms.TokenIssueForm(owners=owners, initial={"owner": str(user.pk)})
        else:
            status = 422
    rows = list(
        access.visible_tokens(user).select_related("user", "tenant").order_by("-created_at")[:500]
    )
    revocable = {
        token.pk
        for token in rows
        if token.revoked_at is None and access.may_revoke_token(user, token)
    }
    response = render_page(
        request,
        "dashboard/tokens.html",
        {
            "tokens": rows,
            "revocable": revocable,
            "issue_form": issue_form,
            "may_issue": may_issue,
            "issued": issued,
            "tenant": tenant,
            "now": timezone.now(),
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"  # the page may hold a secret shown once
    return response


@page
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = access.visible_tokens(request.user).filter(pk=token_id).first()
    if token is None:
        raise Http404("No such token")
    allowed = access.may_revoke_token(request.user, token)
    if not allowed:
        return denied(request, allowed.reason)
    form = forms.TokenRevokeForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    tokens.revoke_token(token_id=token.pk, actor=actor_for(request.user), reason=reason)
    messages.success(request, f"Revoked token {token.name or token.lookup}.")
    return redirect("dashboard:tokens")
