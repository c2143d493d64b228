"""System checks of a production deployment (``manage.py check --deploy``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register


@register(Tags.staticfiles, deploy=True)
def static_files_collected(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Outside DEBUG the web process serves static files only from ``STATIC_ROOT`` (whitenoise):
    every file the finders know must have been collected there, or the dashboard is unstyled and
    every asset is 404."""
    if settings.DEBUG:
        return []
    from django.apps import apps
    from django.contrib.staticfiles import finders

    root = Path(settings.STATIC_ROOT)
    # what collectstatic skips (StaticFilesConfig.ignore_patterns)
    ignored: list[str] = getattr(apps.get_app_config("staticfiles"), "ignore_patterns", [])
    missing = [
        path
        for finder in finders.get_finders()
        for path, _storage in finder.list(ignored)
        if not (root / path).is_file()
    ]
    if not missing:
        return []
    return [
        Error(
            f"{len(missing)} static files are not collected in STATIC_ROOT ({root}), "
            f"e.g. {sorted(missing)[0]}; the web process would answer 404 for them",
            hint="run `python manage.py collectstatic --no-input` with the same "
            "MCPTASKS_VAR_DIR as the web processes",
            id="mcptasks.E001",
        )
    ]
