"""``manage.py export_audit --format csv|jsonl --out FILE [filters]``: FILE and FILE.manifest.json."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from audit.chain import SYSTEM_CHAIN, chain_for_tenant, known_chains
from audit.export import FORMATS, ExportFilters, dump_manifest, export_to_file, manifest_path_for
from audit.record import Actor


def parse_moment(value: str) -> datetime:
    """An ISO 8601 date or time; without an offset it is UTC."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"not an ISO 8601 date or time: {value!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Export audit events (redacted as stored) as CSV or JSONL with a signed manifest "
        "(FILE.manifest.json). The export itself is audited."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--format", choices=FORMATS, required=True)
        parser.add_argument("--out", required=True, help="the file to write")
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--chain", default="", help="tenant:<slug> or system")
        scope.add_argument("--tenant", default="", help="a tenant slug")
        parser.add_argument("--actor", default="", help="user id or display name")
        parser.add_argument("--action", default="", help="e.g. task.created")
        parser.add_argument("--task", default="", help="a task id")
        parser.add_argument("--since", type=parse_moment, help="from (inclusive), ISO 8601")
        parser.add_argument("--until", type=parse_moment, help="to (exclusive), ISO 8601")
        parser.add_argument(
            "--as",
            dest="as_user",
            default="",
            help="username recorded as the exporting actor (default: system)",
        )

    @staticmethod
    def _chain(options: dict[str, Any]) -> str:
        """The chain to export ("" for all); an unknown tenant or chain is an error, not an
        empty signed export."""
        from mcptasks.models import Tenant

        if options["tenant"]:
            slug = options["tenant"]
            if not Tenant.objects.filter(slug=slug).exists() and (
                chain_for_tenant(slug) not in known_chains()
            ):
                raise CommandError(f"no tenant {slug!r}")
            return chain_for_tenant(slug)
        chain = options["chain"]
        if not chain or chain == SYSTEM_CHAIN or chain in known_chains():
            return str(chain)
        slug = chain.removeprefix("tenant:")
        if chain.startswith("tenant:") and Tenant.objects.filter(slug=slug).exists():
            return str(chain)
        raise CommandError(f"no such chain {chain!r} (tenant:<slug> of a tenant, or system)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["since"] and options["until"] and options["since"] >= options["until"]:
            raise CommandError("--since must be before --until")
        filters = ExportFilters(
            chain=self._chain(options),
            actor=options["actor"],
            action=options["action"],
            task_id=options["task"],
            since=options["since"],
            until=options["until"],
        )
        actor = Actor.system("manage.py export_audit")
        if options["as_user"]:
            user = get_user_model().objects.filter(username=options["as_user"]).first()
            if user is None:
                raise CommandError(f"no user {options['as_user']!r}")
            actor = Actor.for_user(user)
        out = Path(options["out"])
        if not out.parent.is_dir():
            raise CommandError(f"cannot write {out}: no directory {out.parent}")
        try:
            with out.open("wb") as stream:
                manifest = export_to_file(filters, options["format"], stream, actor=actor)
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from None
        manifest_path = manifest_path_for(out)
        manifest_path.write_text(dump_manifest(manifest))
        self.stdout.write(
            self.style.SUCCESS(
                f"exported {manifest['count']} events to {out} (sha256 "
                f"{manifest['content_sha256']}); manifest {manifest_path}"
            )
        )
