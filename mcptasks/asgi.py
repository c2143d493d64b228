"""ASGI entry point: the `/mcp` app beside Django (DESIGN §5)."""

from __future__ import annotations

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")

from django.core.asgi import get_asgi_application

from mcptasks import tracing

tracing.configure(role="web")  # before Django builds its handler (its middleware); off by default
django_application = get_asgi_application()

from django.conf import settings  # noqa: E402

from mcptasks.logging import guard_access_logs  # noqa: E402
from mcptasks.mcp.app import with_embedded_worker  # noqa: E402
from mcptasks.routing import build_application  # noqa: E402

guard_access_logs()  # served by uvicorn instead of `manage.py serve` (Daphne): its access log
application = build_application(django_application)
if settings.MCPTASKS_EMBEDDED_WORKER:
    # No separate worker exists on the embedded default: whichever server runs this application
    # (uvicorn, daphne, `manage.py serve`) also runs the in-process worker and beat.
    application = with_embedded_worker(application)

# What start-up built (Django, the models, the tool registry) lives as long as the process: move
# it out of the collector's generations so no collection walks it again on the request path.
gc.freeze()
