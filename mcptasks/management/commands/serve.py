"""Serve mcptasks (uvicorn by default, or Daphne); on the embedded default also run the worker
and beat threads."""

from __future__ import annotations

import ipaddress
import logging
import signal
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

log = logging.getLogger(__name__)

APPLICATION = "mcptasks.asgi:application"
# How long a SIGTERM or Ctrl-C waits for open requests before cutting them (streams never end by
# themselves); under Docker's default 10 s stop grace period.
GRACEFUL_SHUTDOWN_S = 5


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Command(BaseCommand):
    help = (
        "Serve HTTP (uvicorn, or --server daphne); with the embedded default, also the "
        "in-process worker and beat."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--server", default="uvicorn", help=f"the ASGI server: {' or '.join(SERVERS)}"
        )
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
        server = options["server"]
        if server not in SERVERS:
            raise CommandError(f"--server must be {' or '.join(SERVERS)}, got {server!r}")
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

        started = settings.MCPTASKS_EMBEDDED_WORKER and not options["no_worker"]
        if started:
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
        self.stdout.write(f"Serving on http://{host}:{port}/ (MCP endpoint /mcp; {server})")
        try:
            SERVERS[server](host, port)
        finally:
            if started:  # the worker threads finish their job (or 5 s), then the process ends
                embedded.stop()


def uvicorn_config(host: str, port: int) -> Any:
    """What ``serve`` runs uvicorn with."""
    import uvicorn

    return uvicorn.Config(
        APPLICATION,
        host=host,
        port=port,
        # Not uvicorn's default: it would take X-Forwarded-For (and -Proto) from any client on
        # 127.0.0.1 as the request's address; mcptasks.client_ip believes them only from
        # MCPTASKS_TRUSTED_PROXIES, and SECURE_PROXY_SSL_HEADER decides the scheme.
        proxy_headers=False,
        # Channels' router has no lifespan protocol; the embedded worker is started and stopped
        # here, not by the application.
        lifespan="off",
        # settings.LOGGING already routes every logger (uvicorn's too) through structlog and the
        # redactor; uvicorn's own dictConfig would replace that. The access log (uvicorn.access)
        # keeps its query-string filter (mcptasks.logging.guard_access_logs).
        log_config=None,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


class _Uncoloured(logging.Filter):
    """uvicorn's own lines without the ``color_message`` copy it passes for its console format
    (settings.LOGGING would print it as one more field)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.__dict__.pop("color_message", None)
        return True


def run_uvicorn(host: str, port: int) -> None:
    import uvicorn

    errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _Uncoloured) for f in errors.filters):
        errors.addFilter(_Uncoloured())
    server = uvicorn.Server(uvicorn_config(host, port))
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again under the
    # handler it found: SIGTERM's default would end the process before the worker threads are
    # stopped, SIGINT's a KeyboardInterrupt traceback. The shutdown is already done: ignore it.
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, _already_handled) for number in handled}
    try:
        server.run()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _already_handled(number: int, frame: Any) -> None:
    log.debug("signal %d after the server's graceful shutdown", number)


def run_daphne(host: str, port: int) -> None:
    # No --proxy-headers: Daphne would take X-Forwarded-For from any client as its
    # address; mcptasks.client_ip believes it only from MCPTASKS_TRUSTED_PROXIES.
    daphne_cli().run(["-b", host, "-p", str(port), APPLICATION])


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


SERVERS: dict[str, Callable[[str, int], None]] = {"uvicorn": run_uvicorn, "daphne": run_daphne}
