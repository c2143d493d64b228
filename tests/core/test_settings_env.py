"""Settings come from environment variables: no variables boots the embedded default, and a bad
value stops the process with an error that names the variable (STYLE rule 10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

PROBE = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps({
    "engine": settings.DATABASES["default"]["ENGINE"],
    "name": str(settings.DATABASES["default"]["NAME"]),
    "channel_layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "embedded_worker": settings.MCPTASKS_EMBEDDED_WORKER,
    "broker": settings.CELERY_BROKER_URL,
    "debug": settings.DEBUG,
}))
"""
# Secrets production needs, so a bad URL is what fails, not a missing key.
SECRETS = {
    "SECRET_KEY": "s" * 50,
    "MCPTASKS_REQUEST_STATE_KEY": "r" * 50,
    "MCPTASKS_AUDIT_SIGNING_KEY": "a" * 50,
}


def boot(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """Run ``django.setup()`` in a fresh interpreter with only ``variables`` set."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
        "MCPTASKS_VAR_DIR": str(tmp_path / "var"),
        "PYTHONPATH": str(settings.BASE_DIR),
        **variables,
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )


def booted(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The error line that stopped the boot."""
    assert result.returncode != 0, result.stdout
    assert "ImproperlyConfigured" in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_no_variables_boots_the_embedded_default(tmp_path):
    config = booted(boot(tmp_path))

    assert config["engine"] == "django.db.backends.sqlite3"
    assert Path(config["name"]).parent == tmp_path / "var"
    assert config["channel_layer"] == "channels.layers.InMemoryChannelLayer"
    assert config["embedded_worker"] is True
    assert config["broker"] == "memory://"
    # Keys of the embedded default are kept under the var directory it was given.
    assert (tmp_path / "var" / "secret_key").exists()


@pytest.mark.parametrize("url", ["mysql://x", "not a url", "postgres://db-host:5432"])
def test_bad_database_url_stops_the_boot_naming_it(url, tmp_path):
    assert "DATABASE_URL" in refused(boot(tmp_path, DATABASE_URL=url, **SECRETS))


@pytest.mark.parametrize("url", ["http://nope", "redis://cache:6379/zero"])
def test_bad_redis_url_stops_the_boot_naming_it(url, tmp_path):
    assert "REDIS_URL" in refused(boot(tmp_path, REDIS_URL=url, **SECRETS))


def test_production_without_its_secrets_stops_the_boot_naming_the_first_missing(tmp_path):
    line = refused(boot(tmp_path, DATABASE_URL="postgres://app@db:5432/mcptasks"))
    assert "SECRET_KEY" in line


def test_valid_urls_select_postgresql_and_redis(tmp_path):
    config = booted(
        boot(
            tmp_path,
            DATABASE_URL="postgres://app@db:5432/mcptasks",
            REDIS_URL="redis://cache:6379/2",
            **SECRETS,
        )
    )

    assert config["engine"] == "django.db.backends.postgresql"
    assert config["name"] == "mcptasks"
    assert config["channel_layer"] == "channels_redis.core.RedisChannelLayer"
    assert config["embedded_worker"] is False
    assert config["broker"] == "redis://cache:6379/2"
    assert config["debug"] is False
