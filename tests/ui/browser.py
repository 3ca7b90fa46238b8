"""Drive the Prefect UI in Debian's headless Chromium (Playwright, no browser download):
open a paused flow run, fill the approval form, submit."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000  # the machine is shared: the UI may take a while to render
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def signed_in_page(
    browser: Browser, auth_string: str | None, viewport: dict[str, int] | None = None
) -> Page:
    """A page of the Prefect UI, signed in where its server requires credentials as the
    UI's login form signs in: the `user:password` it was given, base64, in localStorage
    (`prefect-password`), which the UI sends as Basic authorization."""
    page = browser.new_page(viewport=viewport or {"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    if auth_string:
        token = base64.b64encode(auth_string.encode()).decode()
        page.add_init_script(f"window.localStorage.setItem('prefect-password', '{token}')")
    return page


def approve_in_ui(
    browser: Browser,
    run_url: str,
    *,
    auth_string: str | None,
    approver: str,
    decision: str,
    reason: str,
    screenshot: str,
) -> Path:
    """Answer the paused run's form as a person would, signed in with auth_string;
    return the screenshot's path (taken with the form filled in, just before Submit)."""
    page = signed_in_page(browser, auth_string)
    try:
        page.goto(run_url)
        page.get_by_role("button", name="Resume").click()
        dialog = page.locator(".p-modal__card")
        _field(dialog, "Approver").locator("textarea").fill(approver)
        _choose(page, dialog, "Decision", decision)
        _field(dialog, "Reason").locator("textarea").fill(reason)
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / screenshot
        page.screenshot(path=str(path))
        dialog.get_by_role("button", name="Submit").click()
        dialog.wait_for(state="detached")
        return path
    finally:
        page.close()


def _field(dialog, label: str):  # type: ignore[no-untyped-def]
    return dialog.locator(".schema-form-property").filter(has_text=label)


def _choose(page: Page, dialog, label: str, value: str) -> None:  # type: ignore[no-untyped-def]
    # The select opens from the keyboard (a click toggles it open and shut again).
    _field(dialog, label).locator("button.p-select-button__control").focus()
    page.keyboard.press("ArrowDown")
    page.get_by_role("option", name=value, exact=True).click()
