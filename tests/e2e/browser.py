"""A real headless browser for the console's tests: Debian's chromium driven by
Playwright (which downloads no browser of its own), with screenshots kept as artifacts
at desktop and phone widths."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

from tests.e2e.harness import wait_until

CHROMIUM = Path("/usr/bin/chromium")
DESKTOP: ViewportSize = {"width": 1280, "height": 860}
PHONE: ViewportSize = {"width": 390, "height": 844}


# Module scope, not session: Playwright's sync API keeps an event loop running in the
# main thread while it is open, and later tests (the async client's) need
# `asyncio.run` there.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless chromium, once per test module."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make chromium` installs Debian's chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield launched
        launched.close()


@dataclass
class Console:
    """One browser tab on the console of a running API."""

    page: Page
    base: str
    shots: Path
    taken: list[Path] = field(default_factory=list)

    def go(self, path: str) -> Page:
        """Open a console path and wait for it to load."""
        self.page.goto(self.base + path)
        return self.page

    def sign_in(self, token: str) -> None:
        """Sign in through the form, as an operator would."""
        self.go("/console/")
        assert "/console/login" in self.page.url
        self.page.fill("#token", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(re.compile(r".*/console/$"))

    def submit(self, form_selector: str) -> str:
        """Press the button of one form (accepting its confirm) and return the notice."""
        self.page.once("dialog", lambda dialog: dialog.accept())
        self.page.locator(form_selector).locator("button").first.click()
        notice = self.page.locator("p.notice")
        notice.wait_for()
        return notice.inner_text()

    def until(
        self, path: str, check: Callable[[Page], bool], what: str, timeout: float = 30
    ) -> None:
        """Reload ``path`` until ``check`` holds for the page."""
        wait_until(lambda: check(self.go(path)), timeout, interval=0.5, what=what)

    def shoot(self, name: str) -> None:
        """Screenshots of the page as it is, at desktop and at phone width; at phone width
        the page must not scroll sideways."""
        self.page.set_viewport_size(DESKTOP)
        self._save(f"{name}-desktop.png")
        self.page.set_viewport_size(PHONE)
        width = self.page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"] + 1, f"{name} is {width} px wide at phone width"
        self._save(f"{name}-phone.png")
        self.page.set_viewport_size(DESKTOP)

    def _save(self, file_name: str) -> None:
        path = self.shots / file_name
        self.page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)


@pytest.fixture
def console_tab(
    browser: Browser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[[str], Console]]:
    """Open a tab on a console at a base URL; its screenshots go under the test's tmp
    dir, whose path is printed."""
    shots = tmp_path / "screenshots"
    shots.mkdir()
    contexts = []

    def open_tab(base: str) -> Console:
        context = browser.new_context(viewport=DESKTOP)
        contexts.append(context)
        return Console(context.new_page(), base, shots)

    yield open_tab
    for context in contexts:
        context.close()
    with capsys.disabled():
        print(f"\nconsole screenshots: {shots}")
