"""docker-compose.yml validates against the Compose Specification (no Docker engine here) and
every service's command exists in the image."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from django.core.management import get_commands
from jsonschema import Draft7Validator

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "tests" / "schemas"  # vendored: tests/schemas/README.md
SCHEMA = SCHEMAS / "compose-spec" / "compose-spec.schema.json"


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_file_validates_against_the_compose_specification():
    schema = json.loads(SCHEMA.read_text())
    errors = list(Draft7Validator(schema).iter_errors(compose()))
    assert not errors, [e.message for e in errors]


def test_compose_has_the_production_services_with_health_and_ordering():
    services = compose()["services"]
    assert {"postgres", "redis", "migrate", "web", "worker", "beat"} <= set(services)
    assert "healthcheck" in services["postgres"] and "healthcheck" in services["redis"]
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["worker"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_every_service_command_exists_in_the_image():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    installed = {re.split(r"[<>=\[ ]", dep, maxsplit=1)[0].lower() for dep in dependencies}
    commands = get_commands()
    for name, service in compose()["services"].items():
        command = service.get("command")
        if name in ("postgres", "redis"):
            continue
        assert command, name
        if command[:2] == ["python", "manage.py"]:
            assert command[2] in commands, f"{name}: manage.py {command[2]} does not exist"
        elif command[0] == "celery":
            assert "celery" in installed
            assert command[1:3] == ["-A", "mcptasks"]
            assert command[3] in ("worker", "beat")
        else:
            raise AssertionError(f"{name}: unexpected command {command}")


def example_names(name: str) -> set[str]:
    return set(re.findall(r"^#?\s*([A-Z_]+)=", (REPO / name).read_text(), re.M))


def test_env_examples_document_every_variable_compose_and_the_app_require():
    text = (REPO / "docker-compose.yml").read_text()
    interpolated = set(re.findall(r"\$\{([A-Z_]+)(?::[?-][^}]*)?\}", text))
    # compose's own .env holds the database passwords; mcptasks.env the app's settings
    assert interpolated <= example_names(".env.example"), interpolated
    assert {"SECRET_KEY", "MCPTASKS_REQUEST_STATE_KEY", "MCPTASKS_AUDIT_SIGNING_KEY"} <= (
        example_names("mcptasks.env.example")
    )
    assert "POSTGRES_PASSWORD" not in example_names("mcptasks.env.example")
    for service in ("migrate", "web", "worker", "beat"):
        assert compose()["services"][service]["env_file"] == "mcptasks.env"


def example_values(name: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+)=(.*)$", (REPO / name).read_text(), re.M))


def interpolated(value: str) -> str:
    """``value`` as compose interpolates it with the values of .env.example."""
    env = example_values(".env.example")

    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        if name in env:
            return env[name]
        assert kind == ":-", f"{name} has no value in .env.example and no default"
        return rest

    return re.sub(r"\$\{([A-Z_]+)(?:(:[?-])([^}]*))?\}", one, value)


def env_of(service: str) -> dict[str, str]:
    return {k: interpolated(v) for k, v in compose()["services"][service]["environment"].items()}


def database_url(service: str) -> Any:
    return urlparse(env_of(service)["DATABASE_URL"])


def test_the_app_runs_as_the_application_role_and_only_migrate_as_the_owner():
    services = compose()["services"]
    postgres = env_of("postgres")
    passwords = example_values(".env.example")
    owner = database_url("migrate")
    assert (owner.username, owner.password) == (
        postgres["POSTGRES_USER"],
        passwords["POSTGRES_PASSWORD"],
    )
    assert env_of("migrate")["MCPTASKS_DB_APP_ROLE"] == postgres["MCPTASKS_DB_APP_ROLE"]
    for service in ("web", "worker", "beat"):
        url = database_url(service)
        assert url.username == postgres["MCPTASKS_DB_APP_ROLE"] != owner.username, service
        assert url.password == passwords["POSTGRES_APP_PASSWORD"], service
        # the owner's password reaches no process of the application
        assert "POSTGRES_PASSWORD" not in str(services[service]["environment"]), service
    for service in ("migrate", "web", "worker", "beat"):
        url = database_url(service)
        assert (url.hostname, url.port) == ("postgres", 5432), service
        assert url.path.strip("/") == postgres["POSTGRES_DB"], service
        redis = urlparse(env_of(service)["REDIS_URL"])
        assert (redis.hostname, redis.port) == ("redis", 6379), service
    init = [v for v in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in v]
    assert init == ["./deploy/postgres:/docker-entrypoint-initdb.d:ro"]
    assert os.access(REPO / "deploy" / "postgres" / "init-app-role.sh", os.X_OK)


def test_the_healthchecks_match_the_settings_of_their_services():
    services = compose()["services"]
    postgres = services["postgres"]
    assert postgres["healthcheck"]["test"] == [
        "CMD-SHELL",
        f"pg_isready -h 127.0.0.1 -U {postgres['environment']['POSTGRES_USER']} "
        f"-d {postgres['environment']['POSTGRES_DB']}",
    ]
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    web = services["web"]
    command = web["command"]
    port = command[command.index("--port") + 1]
    # the healthcheck asks the port web serves on, the port compose publishes
    assert web["healthcheck"]["test"] == ["CMD", "python", "scripts/healthcheck.py", port]
    assert web["ports"] == [f"{port}:{port}"]
    assert command[command.index("--host") + 1] == "0.0.0.0"


def test_the_healthcheck_sends_a_host_the_server_allows():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from healthcheck import host_header
    finally:
        sys.path.pop(0)
    allowed = re.search(r"^ALLOWED_HOSTS=(.*)$", (REPO / "mcptasks.env.example").read_text(), re.M)
    assert allowed
    assert host_header(allowed.group(1)) == "mcp.example.com"
    assert host_header("api.example.com, mcp.example.com") == "api.example.com"
    assert host_header(".example.com") == "healthcheck.example.com"
    assert host_header("*") == "127.0.0.1"
    assert host_header("") == "127.0.0.1"  # the settings' default list starts with it


def test_beat_keeps_its_schedule_in_the_var_dir():
    from django.conf import settings

    assert "--schedule" not in compose()["services"]["beat"]["command"]
    assert Path(settings.CELERY_BEAT_SCHEDULE_FILENAME) == settings.VAR_DIR / "celerybeat-schedule"


def test_dockerignore_keeps_secrets_state_and_caches_out_of_the_image():
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".env", "mcptasks.env", "var", ".venv", ".pytest_cache", ".hypothesis"} <= ignored
    assert {".mypy_cache", ".ruff_cache", "screenshots", "bench/results"} <= ignored
    assert "!.env.example" in ignored


def test_vendored_schemas_match_their_recorded_digests():
    readme = (SCHEMAS / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+\.json)` \|.*\| `([0-9a-f]{64})` \|$", readme, re.M)
    assert {name for name, _ in rows} == {
        str(path.relative_to(SCHEMAS)) for path in SCHEMAS.rglob("*.json")
    }
    for name, digest in rows:
        assert hashlib.sha256((SCHEMAS / name).read_bytes()).hexdigest() == digest, name


def test_dockerfile_runs_as_non_root_with_locked_dependencies():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "uv sync --locked" in dockerfile
    assert re.search(r"^USER mcptasks$", dockerfile, re.M)
    assert "collectstatic" in dockerfile
    # collected into the MCPTASKS_VAR_DIR the containers serve from (STATIC_ROOT is under it)
    before, _, _ = dockerfile.partition("manage.py collectstatic")
    assert re.findall(r"^ENV MCPTASKS_VAR_DIR=(\S+)$", before, re.M) == ["/app/var"]
    assert "MCPTASKS_VAR_DIR=/tmp" not in dockerfile
