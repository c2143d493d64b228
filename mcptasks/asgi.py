"""ASGI entry point: the `/mcp` app beside Django (DESIGN §5)."""

from __future__ import annotations

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")

from django.core.asgi import get_asgi_application

django_application = get_asgi_application()

from mcptasks.logging import guard_access_logs  # noqa: E402
from mcptasks.protocol.app import build_application  # noqa: E402

guard_access_logs()  # served by uvicorn instead of `manage.py serve` (Daphne): its access log
application = build_application(django_application)

# What start-up built (Django, the models, the tool registry) lives as long as the process: move
# it out of the collector's generations so no collection walks it again on the request path.
gc.freeze()
