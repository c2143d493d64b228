"""The dashboard in a real browser: uvicorn serving the whole ASGI application (dashboard, /mcp,
the /ws/tasks socket) in a thread on this process's test database, headless Chromium driven by
Playwright, an MCP client over HTTP, and the worker run on demand (``runner.run_task``).

Playwright's sync API keeps an event loop in the test's thread, where Django refuses the ORM and
``async_to_sync``; everything that touches the database from the test body therefore runs on one
:class:`Backend` thread.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.streams.conftest import serving

T = TypeVar("T")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "screenshots"
CHROMIUM = os.environ.get("MCPTASKS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VERSION = "2026-07-28"
TASK_CAPS = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


class Backend:
    """Runs database work (lifecycle, the worker, queries) on one thread with no event loop."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backend")

    def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self.pool.submit(fn, *args, **kwargs).result(timeout=60)

    def run_task(self, task_id: str) -> str | None:
        """One attempt of the worker on ``task_id``; returns the state it left."""
        from mcptasks import runner

        return self(runner.run_task, task_id)

    def close(self) -> None:
        def close_connection() -> None:
            from django.db import connection

            connection.close()

        self(close_connection)
        self.pool.shutdown(wait=True)


@pytest.fixture
def backend() -> Iterator[Backend]:
    from mcptasks import embedded

    worker = Backend()
    yield worker
    worker.close()
    embedded.clear()


@pytest.fixture
def live_url(transactional_db: None, settings: Any) -> Iterator[str]:
    """A real server for the browser; its application is built here, after the settings it
    reads when built (WhiteNoise serving the static files from their finders, no HTTPS
    redirect)."""
    from django.core.handlers.asgi import ASGIHandler

    from mcptasks.routing import build_application

    settings.WHITENOISE_USE_FINDERS = True
    settings.WHITENOISE_AUTOREFRESH = False
    # Plain HTTP on the loopback: no redirect to HTTPS, cookies without the Secure flag.
    settings.SECURE_SSL_REDIRECT = False
    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False
    with serving(build_application(ASGIHandler())) as url:
        yield url


@pytest.fixture
def browser(live_url: str, cast: dict[str, dict[str, Any]]) -> Iterator[Any]:
    """Headless Chromium, started after the server and the cast exist (Playwright's loop in this
    thread would refuse the ORM from here on)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Session:
    """One signed-in browser user: a context (own cookies) and its pages."""

    def __init__(
        self,
        browser: Any,
        base_url: str,
        name: str,
        password: str,
        width: int = 1280,
        height: int = 900,
        **options: Any,
    ) -> None:
        self.name = name
        self.base_url = base_url
        self.context = browser.new_context(
            base_url=base_url,
            viewport={"width": width, "height": height},
            accept_downloads=True,
            **options,
        )
        self.console_errors: list[str] = []
        self.page = self.new_page()
        self.page.goto("/login/")
        self.page.fill("#id_username", name)
        self.page.fill("#id_password", password)
        self.page.click("button[type=submit]")
        # The start page of the role: the inbox, the tasks or the audit trail.
        self.page.wait_for_url(re.compile(rf"^{re.escape(base_url)}/(inbox|tasks|audit)/$"))

    def new_page(self) -> Any:
        page = self.context.new_page()
        page.on(
            "console",
            lambda message: message.type == "error" and self.console_errors.append(message.text),
        )
        page.on("pageerror", lambda error: self.console_errors.append(str(error)))
        return page

    def open(self, path: str) -> Any:
        """A new page (tab) at ``path`` whose live socket is connected."""
        page = self.new_page()
        page.goto(path)
        wait_live(page)
        return page

    def csp_violations(self) -> list[str]:
        return [
            e for e in self.console_errors if "Content Security Policy" in e or "Refused to" in e
        ]


def wait_live(page: Any) -> None:
    page.wait_for_selector("#live-status[data-state='live']", state="attached", timeout=15_000)


@pytest.fixture
def sign_in(
    browser: Any, live_url: str, cast: dict[str, dict[str, Any]]
) -> Iterator[Callable[..., Session]]:
    sessions: list[Session] = []

    def make(name: str, width: int = 1280, height: int = 900, **options: Any) -> Session:
        """``options`` go to the browser context (``timezone_id``, ``reduced_motion``…)."""
        session = Session(browser, live_url, name, cast[name]["password"], width, height, **options)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.context.close()


class Mcp:
    """A minimal MCP client over HTTP (2026-07-28, stateless) for one cast member's token."""

    def __init__(self, base_url: str, token: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=30)
        self.token = token
        self.next_id = 0

    def call(self, method: str, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        params = {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": TASK_CAPS,
                "io.modelcontextprotocol/clientInfo": {"name": "browser-tests", "version": "1"},
            },
        }
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": VERSION,
            "mcp-method": method,
            "authorization": f"Bearer {self.token}",
        }
        if name:
            headers["mcp-name"] = name
        response = self.client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params},
            headers=headers,
        )
        body = response.json()
        assert "result" in body, body
        return body["result"]  # type: ignore[no-any-return]

    def start(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call a task tool; return the task id."""
        result = self.call("tools/call", {"name": tool, "arguments": arguments}, name=tool)
        assert result["resultType"] == "task", result
        return result["taskId"]  # type: ignore[no-any-return]

    def get(self, task_id: str) -> dict[str, Any]:
        return self.call("tasks/get", {"taskId": task_id}, name=task_id)


@pytest.fixture
def mcp_as(live_url: str, cast: dict[str, dict[str, Any]]) -> Iterator[Callable[[str], Mcp]]:
    clients: list[Mcp] = []

    def make(name: str) -> Mcp:
        client = Mcp(live_url, cast[name]["token"])
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.client.close()


@pytest.fixture
def shoot() -> Callable[[Any, str], None]:
    """Write a full-page screenshot to screenshots/<name>.png (git-ignored)."""
    SCREENSHOTS.mkdir(exist_ok=True)

    def take(page: Any, name: str) -> None:
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

    return take


AXE = Path(__file__).resolve().parent / "assets" / "axe.min.js"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa"]


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """The serious and critical WCAG 2.2 A/AA violations axe-core finds in the page as it is."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    found = page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}})"
        ".then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))})))",
        WCAG_TAGS,
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]
