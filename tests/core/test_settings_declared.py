"""Every setting the code reads is declared, and every ``MCPTASKS_*`` variable is documented.

Statically (``ast``): the settings ``mcptasks/``, ``audit/`` and ``dashboard/`` read
(``settings.X``, ``getattr(settings, "X", …)``) must be defined by ``mcptasks.settings`` (or be
one of Django's own defaults, for non-``MCPTASKS_`` names); the ``MCPTASKS_*`` environment
variables read by the settings (through ``mcptasks.conf``) or directly by the code must each
have a row in README.md's settings table (the one with ``DATABASE_URL``) or its "Limits" table.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from django.conf import global_settings

import mcptasks.settings as settings_module

ROOT = Path(settings_module.BASE_DIR)
PACKAGES = ("mcptasks", "audit", "dashboard")
SETTINGS_FILES = (ROOT / "mcptasks" / "settings.py", ROOT / "mcptasks" / "conf.py")
# The mcptasks.conf readers (and os.environ.get / os.getenv): their first argument is a variable.
ENV_READERS = {"env_str", "env_bool", "env_int", "env_list", "env_json_object", "secret", "get"}
SETTING = re.compile(r"^[A-Z][A-Z0-9_]*$")
VARIABLE = re.compile(r"^MCPTASKS_[A-Z0-9_]+$")


def sources() -> Iterator[tuple[Path, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path not in SETTINGS_FILES:
                yield path, ast.parse(path.read_text(), filename=str(path))


def settings_names(tree: ast.Module) -> set[str]:
    """The names ``django.conf.settings`` is bound to in a module (``settings`` unless aliased)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "django.conf":
            names |= {
                alias.asname or alias.name for alias in node.names if alias.name == "settings"
            }
    return names


def settings_read(tree: ast.Module) -> set[str]:
    """``settings.X`` and ``getattr(settings, "X"[, default])`` in one module."""
    bound = settings_names(tree)
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and SETTING.match(node.attr)
        ):
            found.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr"}
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in bound
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            found.add(node.args[1].value)
    return found


def variables_read(tree: ast.Module) -> set[str]:
    """``MCPTASKS_*`` environment variables one module reads: the first argument of an env
    reader (``env_int("MCPTASKS_X", …)``, ``os.environ.get(…)``, ``os.getenv(…)``) or an
    ``os.environ["MCPTASKS_X"]`` subscript."""
    found = set()
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called in ENV_READERS or called == "getenv":
                name = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            name = node.slice
        if (
            isinstance(name, ast.Constant)
            and isinstance(name.value, str)
            and VARIABLE.match(name.value)
        ):
            found.add(name.value)
    return found


def all_settings_read() -> dict[str, set[str]]:
    """Setting name → the files reading it."""
    readers: dict[str, set[str]] = {}
    for path, tree in sources():
        for name in settings_read(tree):
            readers.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return readers


def all_variables_read() -> set[str]:
    found = set()
    for path in SETTINGS_FILES:
        found |= variables_read(ast.parse(path.read_text()))
    for _path, tree in sources():
        found |= variables_read(tree)
    return found


def readme_tables() -> list[list[str]]:
    """README.md's tables, each as its lines."""
    tables: list[list[str]] = []
    current: list[str] = []
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def documented_variables() -> set[str]:
    """The variables named (in backquotes) in the first column of the settings table and of
    the "Limits" table (``| setting | default | …``)."""
    documented = set()
    for table in readme_tables():
        settings_table = any(line.startswith("| `DATABASE_URL` |") for line in table)
        limits_table = table[0].startswith("| setting | default |")
        if not (settings_table or limits_table):
            continue
        for line in table[2:]:
            first_column = line.split("|")[1]
            documented |= set(re.findall(r"`([A-Z][A-Z0-9_]*)`", first_column))
    return documented


def test_the_collectors_find_what_the_code_reads() -> None:
    """Not vacuous: known reads and variables are found, in each of the three packages."""
    readers = all_settings_read()
    assert any(path.startswith("mcptasks/") for path in readers["MCPTASKS_LEASE_S"])
    assert any(path.startswith("audit/") for path in readers["MCPTASKS_AUDIT_MAX_DATA_BYTES"])
    assert any(path.startswith("dashboard/") for files in readers.values() for path in files)
    variables = all_variables_read()
    assert {"MCPTASKS_VAR_DIR", "MCPTASKS_LEASE_S", "MCPTASKS_REQUEST_STATE_KEY"} <= variables
    assert "DATABASE_URL" not in variables  # only MCPTASKS_* variables are collected
    assert "DATABASE_URL" in documented_variables()


def test_every_setting_the_code_reads_is_declared() -> None:
    declared = set(vars(settings_module))
    defaults = set(vars(global_settings))
    undeclared = {
        name: sorted(files)
        for name, files in all_settings_read().items()
        if name not in declared and (name.startswith("MCPTASKS_") or name not in defaults)
    }
    assert not undeclared, f"read but not declared in mcptasks/settings.py: {undeclared}"


def test_every_mcptasks_variable_has_a_readme_row() -> None:
    missing = sorted(all_variables_read() - documented_variables())
    assert not missing, (
        f"MCPTASKS_* variables without a row in README.md's settings table: {missing}"
    )
