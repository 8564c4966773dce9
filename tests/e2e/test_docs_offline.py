"""/docs and /redoc load anywhere: a real headless Chromium (Debian's, `make chromium`)
with every request off this machine refused renders every operation of the document."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route

from tests.e2e.harness import Processes, free_port, wait_healthy


def offline_page(browser: Browser, base: str, outside: list[str]) -> Page:
    """A page whose requests to anywhere but ``base`` are refused and recorded."""
    page = browser.new_page()

    def only_local(route: Route) -> None:
        if route.request.url.startswith(base):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    return page


def operations(base: str) -> list[dict[str, Any]]:
    document = httpx.get(f"{base}/openapi.json", timeout=10).json()
    return [
        {"path": path, "method": method, **operation}
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


@pytest.fixture
def api_base(processes: Processes) -> str:
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return wait_healthy(port)


def test_swagger_ui_renders_every_operation_without_a_network(
    api_base: str, browser: Browser
) -> None:
    outside: list[str] = []
    page = offline_page(browser, api_base, outside)
    page.goto(f"{api_base}/docs")
    expected = operations(api_base)
    page.wait_for_function(
        f"document.querySelectorAll('.opblock').length >= {len(expected)}", timeout=30_000
    )
    shown = page.eval_on_selector_all(
        ".opblock",
        "blocks => blocks.map(b => [b.querySelector('.opblock-summary-method').textContent, "
        "b.querySelector('.opblock-summary-path').getAttribute('data-path')])",
    )
    assert sorted((m.lower(), p) for m, p in shown) == sorted(
        (op["method"], op["path"]) for op in expected
    )
    assert outside == []


def test_redoc_renders_every_operation_without_a_network(api_base: str, browser: Browser) -> None:
    outside: list[str] = []
    page = offline_page(browser, api_base, outside)
    page.goto(f"{api_base}/redoc")
    expected = operations(api_base)
    page.wait_for_selector("[data-section-id^='operation/']", timeout=30_000)
    sections = page.eval_on_selector_all(
        "[data-section-id^='operation/']", "els => els.map(e => e.getAttribute('data-section-id'))"
    )
    assert sorted(set(sections)) == sorted(f"operation/{op['operationId']}" for op in expected)
    assert outside == []
