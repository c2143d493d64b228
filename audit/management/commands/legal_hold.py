"""``manage.py legal_hold place|release|list``: legal holds on a tenant or a task (audited)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from audit.holds import HoldError, place_hold, release_hold
from audit.models import LegalHold
from audit.record import Actor


class Command(BaseCommand):
    help = (
        "Place, release or list legal holds. A hold on a tenant (or on one task) stops audit "
        "retention and TTL deletion of what it covers until released; both are audited."
    )

    def add_arguments(self, parser: Any) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True)
        place = verbs.add_parser("place", help="place a hold")
        place.add_argument("--tenant", required=True, help="a tenant slug")
        place.add_argument("--task", default="", help="hold only this task (default: the tenant)")
        place.add_argument("--reason", required=True, help="the matter, ticket or order")
        release = verbs.add_parser("release", help="release a hold")
        release.add_argument("hold", type=int, help="the hold's id (see `legal_hold list`)")
        release.add_argument("--reason", required=True, help="why it may be released")
        listing = verbs.add_parser("list", help="list holds (active ones by default)")
        listing.add_argument("--tenant", default="", help="only this tenant's holds")
        listing.add_argument("--all", action="store_true", help="include released holds")
        for sub in (place, release):
            sub.add_argument(
                "--as",
                dest="as_user",
                default="",
                help="username recorded as the actor (default: system)",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["verb"] == "list":
            self._list(options)
            return
        actor = Actor.system("manage.py legal_hold")
        if options["as_user"]:
            user = get_user_model().objects.filter(username=options["as_user"]).first()
            if user is None:
                raise CommandError(f"no user {options['as_user']!r}")
            actor = Actor.for_user(user, kind="operator")
        try:
            if options["verb"] == "place":
                hold = place_hold(
                    tenant_slug=options["tenant"],
                    task_id=options["task"],
                    reason=options["reason"],
                    actor=actor,
                )
                self.stdout.write(self.style.SUCCESS(f"placed {hold}"))
            else:
                hold = release_hold(hold_id=options["hold"], reason=options["reason"], actor=actor)
                self.stdout.write(self.style.SUCCESS(f"released {hold}"))
        except HoldError as exc:
            raise CommandError(str(exc)) from None

    def _list(self, options: dict[str, Any]) -> None:
        holds = LegalHold.objects.select_related("tenant").order_by("pk")
        if options["tenant"]:
            holds = holds.filter(tenant__slug=options["tenant"])
        if not options["all"]:
            holds = holds.filter(released_at__isnull=True)
        for hold in holds:
            state = (
                f"released {hold.released_at:%Y-%m-%dT%H:%MZ} by {hold.released_by}"
                if hold.released_at
                else "active"
            )
            self.stdout.write(
                f"#{hold.pk}  {hold.tenant.slug}  {hold.task_id or '(whole tenant)'}  {state}  "
                f"placed {hold.placed_at:%Y-%m-%dT%H:%MZ} by {hold.placed_by}: {hold.reason}"
            )
