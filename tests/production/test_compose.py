"""docker-compose.yml validates against the Compose Specification (no Docker engine here) and
every service's command exists in the image."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

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


def test_env_example_documents_every_variable_compose_requires():
    text = (REPO / "docker-compose.yml").read_text()
    required = set(re.findall(r"\$\{([A-Z_]+):\?", text))
    documented = set(re.findall(r"^#?\s*([A-Z_]+)=", (REPO / ".env.example").read_text(), re.M))
    assert required <= documented
    assert {"SECRET_KEY", "MCPTASKS_REQUEST_STATE_KEY", "MCPTASKS_AUDIT_SIGNING_KEY"} <= documented


def test_dockerfile_runs_as_non_root_with_locked_dependencies():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "uv sync --locked" in dockerfile
    assert re.search(r"^USER mcptasks$", dockerfile, re.M)
    assert "collectstatic" in dockerfile
