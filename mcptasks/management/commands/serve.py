"""Serve mcptasks with Daphne; on the embedded default also run the worker and beat threads."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Command(BaseCommand):
    help = "Serve HTTP (Daphne); with the embedded default, also the in-process worker and beat."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--workers", type=int, default=2, help="worker threads on the embedded default"
        )
        parser.add_argument(
            "--no-worker", action="store_true", help="do not start the in-process worker and beat"
        )
        parser.add_argument(
            "--migrate", action="store_true", help="apply migrations first (same process)"
        )
        parser.add_argument(
            "--seed-demo",
            action="store_true",
            help="seed the demo if the database has no tenant yet (prints its tokens once)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        if not 0 <= port <= 65535:
            raise CommandError(f"--port must be 0-65535, got {port}")
        if options["workers"] < 1:
            raise CommandError(f"--workers must be at least 1, got {options['workers']}")
        from mcptasks.tools.registry import ToolPackError, registry

        try:  # fail fast: a broken tool pack would otherwise fail every job it runs
            registry.ensure_loaded()
        except ToolPackError as exc:
            raise CommandError(f"{exc}; not serving") from exc
        if settings.MCPTASKS_CONFORMANCE_MODE:
            if not is_loopback(host):
                raise CommandError(
                    "MCPTASKS_CONFORMANCE_MODE serves tokenless requests and is "
                    f"refused on the non-loopback address {host!r}"
                )
            log.warning(
                "CONFORMANCE MODE: tokenless requests to /mcp act as the conformance "
                "principal. Never use this outside a test run."
            )
        # One boot for everything `make run` does: migrate, seed if empty, serve.
        if options["migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        if options["seed_demo"]:
            call_command("seed_demo", if_empty=True, stdout=self.stdout)
        from mcptasks import embedded

        if settings.MCPTASKS_EMBEDDED_WORKER and not options["no_worker"]:
            embedded.start(workers=options["workers"])
            self.stdout.write(f"In-process worker ({options['workers']} threads) and beat started.")
        else:
            if settings.MCPTASKS_EMBEDDED_WORKER:
                # Asked for explicitly; the embedded queue lives in this process, so say it.
                self.stderr.write(
                    "--no-worker on the embedded default: tasks created here are not run "
                    "(set DATABASE_URL and REDIS_URL and run `celery -A mcptasks worker`)"
                )
            embedded.decline()  # the application must not start one on its first request
        # No --proxy-headers: Daphne would take X-Forwarded-For from any client as its
        # address; mcptasks.client_ip believes it only from MCPTASKS_TRUSTED_PROXIES.
        self.stdout.write(f"Serving on http://{host}:{port}/ (MCP endpoint /mcp)")
        daphne_cli().run(["-b", host, "-p", str(port), "mcptasks.asgi:application"])


def daphne_cli() -> Any:
    """Daphne's command line with its access log replaced by ours (:class:`AccessLog`): Daphne
    writes request lines, query strings and all, raw to stdout."""
    from daphne.cli import CommandLineInterface
    from daphne.server import Server

    from mcptasks.logging import AccessLog

    class RedactingServer(Server):  # type: ignore[misc]
        def __init__(self, *args: Any, action_logger: Any = None, **kwargs: Any) -> None:
            super().__init__(*args, action_logger=AccessLog() if action_logger else None, **kwargs)

    cli = CommandLineInterface()
    cli.server_class = RedactingServer
    return cli
