"""A real browser for the dashboard tests: Debian's chromium driven by Selenium through chromedriver.

Without chromium/chromedriver the browser tests are skipped on a developer's machine and fail
under CI=true (.ci/run installs both).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
]


def require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if not missing:
        return
    message = f"the dashboard browser tests need {', '.join(missing)} (apt-get install chromium chromium-driver)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


class Browser:
    """One headless chromium with a fresh profile, and the few moves the tests make."""

    def __init__(self, base_url: str, profile: Path, screens: Path) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(20)
        self.base_url = base_url.rstrip("/")
        self.screens = screens

    def close(self) -> None:
        self.driver.quit()

    def go(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def text(self, selector: str) -> str:
        return str(self.css(selector).text)

    def fill(self, form: str, **fields: str) -> None:
        for name, value in fields.items():
            box = self.css(f"{form} [name={name}]")
            box.clear()
            box.send_keys(value)

    def choose(self, form: str, name: str, value: str) -> None:
        """Pick the option with ``value`` in the form's ``<select name=name>``."""
        from selenium.webdriver.support.ui import Select

        Select(self.css(f"{form} select[name={name}]")).select_by_value(value)

    def submit(self, button: str) -> None:
        """Click a submit button and wait for the next page."""
        self.click_through(self.css(button))

    def click_through(self, element: Any) -> None:
        """Click ``element`` (a submit button or a link found on this page) and wait for the next page."""
        from selenium.webdriver.support.ui import WebDriverWait

        # A mark on the old page's window: gone once the next page has loaded (no stale element handles).
        self.driver.execute_script("window.__pymqOldPage = true")
        element.click()
        WebDriverWait(self.driver, 15).until(
            lambda d: d.execute_script("return !window.__pymqOldPage && document.readyState === 'complete'")
        )

    def shot(self, name: str) -> Path:
        path = self.screens / f"{name}.png"
        # the whole page, not just the window: a viewport as tall as the document for the shot
        height = int(self.driver.execute_script("return document.documentElement.scrollHeight"))
        metrics = {"width": 1400, "height": max(600, min(height, 4000)), "deviceScaleFactor": 1, "mobile": False}
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        try:
            self.driver.save_screenshot(str(path))
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        return path
