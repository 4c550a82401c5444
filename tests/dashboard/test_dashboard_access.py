"""Who may do what in the dashboard, in a real browser: the ACL login (a non-admin account is refused an
admin operation, an admin account is not) and ``--read-only``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pymq.testing.processes import DaemonProcess, broker_process, namesrv_process
from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, admin_account, write_acl
from tests.dashboard.browser import Browser
from tests.dashboard.conftest import wait_for_broker

pytestmark = pytest.mark.integration

ACL = acl_toml(
    admin_account("ops"),
    account("viewer", default_topic_perm="SUB", default_group_perm="SUB"),
)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A cluster with ACL on and a dashboard that asks for a login (its charts poll as ``ops``)."""
    work = tmp_path_factory.mktemp("dashboard-acl")
    acl = str(write_acl(work / "acl.toml", ACL))
    env = {
        "PYMQ_ACL__ACCESS_KEY": BROKER_CREDENTIALS["access_key"],
        "PYMQ_ACL__SECRET_KEY": BROKER_CREDENTIALS["secret_key"],
    }
    started: list[DaemonProcess] = []
    try:
        ns = namesrv_process(work, "--acl-file", acl)
        started.append(ns.start())
        started.append(broker_process(work, ns.address, "broker-s", "--acl-file", acl, env=env).start())
        wait_for_broker(ns.address, credentials={"access_key": "ops", "secret_key": "ops-secret"})
        args = ["--namesrv", ns.address, "--port", "0", "--login", "--access-key", "ops", "--secret-key", "ops-secret"]
        dash = DaemonProcess("dashboard", args, work)
        started.append(dash.start())
        yield dash
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture
def elsewhere(browser: Browser) -> Iterator[Browser]:
    """The shared browser, pointed at another dashboard for one test (and back after it, logged out)."""
    home = browser.base_url
    try:
        yield browser
    finally:
        browser.base_url = home
        browser.driver.delete_all_cookies()


def log_in(browser: Browser, access_key: str, secret_key: str) -> None:
    browser.go("/login")
    browser.fill("#login", access_key=access_key, secret_key=secret_key)
    browser.submit("#login button")


def test_login_then_a_non_admin_is_refused_an_admin_operation(secured: DaemonProcess, elsewhere: Browser) -> None:
    browser = elsewhere
    browser.base_url = f"http://{secured.address}"
    browser.driver.delete_all_cookies()
    browser.go("/cluster")
    assert browser.text("h1") == "Log in"  # every page asks for a login first
    log_in(browser, "viewer", "wrong-secret")
    assert "login refused" in browser.text(".flash.error")
    browser.shot("login-refused")

    log_in(browser, "viewer", "viewer-secret")
    assert browser.text("h1") == "Cluster" and "broker-s" in browser.text("#brokers")
    assert "viewer" in browser.text("header .who")
    assert "viewer-secret" not in browser.driver.page_source
    browser.go("/topics")
    browser.fill("#create-topic", topic="not-for-viewers")
    browser.submit("#create-topic button")
    refusal = browser.text("#flash")
    assert "not created" in refusal and "admin" in refusal, refusal
    browser.shot("acl-refused")
    browser.go("/accounts")  # the account list is for admins only
    assert "admin permission required" in browser.text("#error")

    browser.submit("header .who button")  # log out
    assert browser.text("h1") == "Log in"
    log_in(browser, "ops", "ops-secret")
    browser.go("/accounts")  # the accounts, read by an admin: rights, no secrets
    accounts = browser.text("#accounts")
    assert "viewer no SUB SUB" in accounts and "ops yes PUB|SUB PUB|SUB" in accounts, accounts
    assert "secret" not in browser.driver.page_source
    browser.shot("accounts")
    browser.go("/topics")
    browser.fill("#create-topic", topic="for-ops")
    browser.submit("#create-topic button")
    assert "topic for-ops created" in browser.text("#flash")


def test_read_only_refuses_every_mutation(daemons: dict[str, DaemonProcess], elsewhere: Browser) -> None:
    browser = elsewhere
    work = Path(daemons["dashboard"].workdir)
    ro = DaemonProcess("dashboard", ["--namesrv", daemons["namesrv"].address, "--port", "0", "--read-only"], work)
    try:
        ro.start()
        browser.base_url = f"http://{ro.address}"
        browser.go("/topics")
        assert browser.text(".badge") == "read-only"
        assert not browser.css("#create-topic button").is_enabled()
        browser.driver.execute_script("document.querySelector('#create-topic button').disabled = false")
        browser.fill("#create-topic", topic="read-only-victim")
        browser.submit("#create-topic button")
        assert browser.text("h1") == "Refused" and "read-only" in browser.text("#error")
    finally:
        ro.stop()
