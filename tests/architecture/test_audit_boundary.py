"""audit/ never imports the REST API package (mcptasks.api, or the old mcptasks.api_* modules):
audit's REST views build on mcptasks.restkit, which imports neither (read statically, with ast,
so a lazy import inside a function counts too)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_rest_api(module: str) -> bool:
    return module == "mcptasks.api" or module.startswith(("mcptasks.api.", "mcptasks.api_"))


def rest_api_imports(source: str) -> Iterator[str]:
    """The REST API modules ``source`` imports (``import …``, ``from … import …``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if _is_rest_api(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _is_rest_api(node.module):
                yield node.module
            elif node.module == "mcptasks":
                named = (f"mcptasks.{alias.name}" for alias in node.names)
                yield from (name for name in named if _is_rest_api(name))


def offenders(*packages: str) -> dict[str, list[str]]:
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            imported = list(rest_api_imports(path.read_text()))
            if imported:
                found[str(path.relative_to(ROOT))] = imported
    return found


def test_no_audit_module_imports_the_rest_api_package() -> None:
    assert offenders("audit") == {}


def test_the_shared_rest_base_imports_no_rest_api_module_either() -> None:
    # audit builds on mcptasks.restkit: through it, audit would import the REST API after all.
    assert offenders("mcptasks/restkit") == {}


def test_the_check_sees_every_way_of_importing_the_rest_api() -> None:
    source = """
import mcptasks.api
import mcptasks.api_filters as f
from mcptasks.api import views
from mcptasks.api.serializers import TaskDetailSerializer
from mcptasks import api, access, api_urls

def lazily():
    from mcptasks.api.filters import TaskFilter
"""
    assert sorted(rest_api_imports(source)) == [
        "mcptasks.api",
        "mcptasks.api",
        "mcptasks.api",
        "mcptasks.api.filters",
        "mcptasks.api.serializers",
        "mcptasks.api_filters",
        "mcptasks.api_urls",
    ]
    assert list(rest_api_imports("from mcptasks import access\nimport mcptasks.apis")) == []
