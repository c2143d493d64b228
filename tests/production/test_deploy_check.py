"""`manage.py check --deploy` is clean with production variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def production_env(var_dir) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "REDIS"))}
    env.update(
        {
            # check --deploy connects to neither (the port of this URL is closed on purpose)
            "DATABASE_URL": "postgres://u@127.0.0.1:5432/x",
            "REDIS_URL": "redis://127.0.0.1:1/0",
            "SECRET_KEY": "k" * 10 + "Zq8#x!v2@LmN4$pR6^sT8&uW0*yA3(bC5)dE7-fG9_hJ1+kM",
            "MCPTASKS_REQUEST_STATE_KEY": "r" * 40,
            "MCPTASKS_AUDIT_SIGNING_KEY": "a" * 40,
            "ALLOWED_HOSTS": "mcp.example.com",
            "MCPTASKS_VAR_DIR": str(var_dir),
            "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
        }
    )
    env.pop("DEBUG", None)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_variables(tmp_path):
    env = production_env(tmp_path)
    collected = manage(env, "collectstatic", "--no-input", "-v0")
    assert collected.returncode == 0, collected.stderr
    result = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_fails_loudly_when_static_files_are_not_collected(tmp_path):
    result = manage(production_env(tmp_path), "check", "--deploy")
    assert result.returncode != 0
    assert "mcptasks.E001" in result.stderr
    assert "collectstatic" in result.stderr


def test_debug_is_off_in_production(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": "postgres://u@127.0.0.1:5432/x",
        "SECRET_KEY": "s",
        "MCPTASKS_REQUEST_STATE_KEY": "r",
        "MCPTASKS_AUDIT_SIGNING_KEY": "a",
        "MCPTASKS_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
    }
    env.pop("DEBUG", None)
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DEBUG, settings.SESSION_COOKIE_SECURE, settings.SECURE_HSTS_SECONDS)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.split() == ["False", "True", "31536000"], result.stderr
