"""``manage.py purge_audit --tenant SLUG [--older-than-days N]`` (or ``--due``): retention."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.models import RetentionPolicy
from audit.record import Actor
from audit.retention import PurgeResult, RetentionRefused, purge_due, purge_tenant


class Command(BaseCommand):
    help = (
        "Purge a tenant's audit events older than N days (default: its retention policy), "
        "leaving a checkpoint so verify_audit still passes; --due applies every policy. "
        "Each purge is audited."
    )

    def add_arguments(self, parser: Any) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--tenant", help="a tenant slug")
        target.add_argument("--due", action="store_true", help="apply every tenant's policy")
        parser.add_argument(
            "--older-than-days",
            type=int,
            help="age in days (≥ 1); default: the tenant's retention policy",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        actor = Actor.system("manage.py purge_audit")
        try:
            if options["due"]:
                results = purge_due(actor=actor)
            else:
                days = options["older_than_days"]
                if days is None:
                    days = (
                        RetentionPolicy.objects.filter(tenant__slug=options["tenant"])
                        .values_list("keep_days", flat=True)
                        .first()
                    )
                    if days is None:
                        raise CommandError(
                            f"tenant {options['tenant']!r} has no retention "
                            f"policy; pass --older-than-days"
                        )
                results = [
                    purge_tenant(tenant_slug=options["tenant"], older_than_days=days, actor=actor)
                ]
        except RetentionRefused as exc:
            raise CommandError(str(exc)) from None
        for result in results:
            self.stdout.write(self._describe(result))

    @staticmethod
    def _describe(result: PurgeResult) -> str:
        held = (
            f" (stopped before the events of a task under legal hold #{result.held_by})"
            if result.held_by is not None
            else ""
        )
        if not result.purged:
            return f"{result.chain}: nothing older to purge{held}"
        return (
            f"{result.chain}: purged {result.purged} events; checkpoint seq "
            f"{result.checkpoint_seq} {result.checkpoint_hash[:16]}…, audit.purged seq "
            f"{result.event_seq}{held}"
            + (f" (dropped partition {result.partition})" if result.partition else "")
        )
