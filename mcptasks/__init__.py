"""The mcptasks package. Its Celery app (``celery_app``) is loaded on first use or by Django's app
registry (apps.py), never by importing the package: the codec (mcptasks/protocol) imports no
Django, and Celery's Django fix-up would."""

from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    if name == "celery_app":
        from mcptasks.celery import app

        return app
    raise AttributeError(f"module 'mcptasks' has no attribute {name!r}")
