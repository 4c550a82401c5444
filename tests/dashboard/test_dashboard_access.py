"""Who may do what in the dashboard, in a real browser: the ACL login (a non-admin account is refused an
admin operation, an admin account is not) and ``--read-only``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from pymq.client.admin import AdminClient
from pymq.client.sync import Message, Producer
from pymq.errors import PymqError
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
def secured_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, str]]:
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
        yield dash, ns.address
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture(scope="module")
def secured(secured_cluster: tuple[DaemonProcess, str]) -> DaemonProcess:
    """The secured cluster's dashboard."""
    return secured_cluster[0]


@pytest.fixture(scope="module")
def secured_namesrv(secured_cluster: tuple[DaemonProcess, str]) -> str:
    """The secured cluster's nameserver address."""
    return secured_cluster[1]


async def with_admin(namesrv: str, action: Callable[[AdminClient], Awaitable[None]]) -> None:
    """``await action(admin)`` with an admin client signed by ``ops`` (test set-up, not UI)."""
    async with AdminClient(namesrv, access_key="ops", secret_key="ops-secret") as admin:
        await action(admin)


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
    assert "-secret" not in browser.driver.page_source  # no account's secret (the form has a write-only field)
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


def forge(browser: Browser, action: str, fields: dict[str, str], *, with_csrf: bool) -> None:
    """Post ``fields`` to ``action`` from the current page (with its CSRF token, or without one)."""
    browser.driver.execute_script(
        """const [action, fields, withCsrf] = arguments; const f = document.createElement('form');
        f.method = 'post'; f.action = action;
        const add = (k, v) => { const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i); };
        for (const [k, v] of Object.entries(fields)) add(k, v);
        const token = document.querySelector('[name=csrf_token]');
        if (withCsrf && token) add('csrf_token', token.value);
        const b = document.createElement('button'); b.id = 'forged'; f.appendChild(b); document.body.appendChild(f);""",
        action,
        fields,
        with_csrf,
    )
    browser.submit("#forged")


def signed_send(namesrv: str, access_key: str, secret_key: str, topic: str) -> None:
    with Producer(namesrv, "acl-edit-producer", access_key=access_key, secret_key=secret_key) as producer:
        producer.send(Message(topic, b"signed with an account made in the dashboard"))


def test_an_admin_edits_acl_accounts_in_the_ui(
    secured: DaemonProcess, secured_namesrv: str, elsewhere: Browser
) -> None:
    """Create an account from the accounts page; a client with it is accepted; edit, then delete it.
    A non-admin is refused, and so is a post without the CSRF token."""
    browser = elsewhere
    browser.base_url = f"http://{secured.address}"
    browser.driver.delete_all_cookies()
    log_in(browser, "ops", "ops-secret")
    browser.go("/accounts")
    browser.fill("#account", access_key="newbie", secret_key="newbie-secret-1", topic_perms="acl-edited=PUB")
    browser.choose("#account", "default_group_perm", "SUB")
    browser.submit("#account button")
    assert browser.text("#flash") == "account newbie created on broker-s/0"
    row = next(r.text for r in browser.all("#accounts tbody tr") if r.text.startswith("newbie"))
    assert row.startswith("newbie no DENY SUB acl-edited=PUB"), row
    assert "newbie-secret-1" not in browser.driver.page_source
    browser.shot("accounts-created")

    async def topic(admin: AdminClient) -> None:
        await admin.create_topic("acl-edited", 2)

    asyncio.run(with_admin(secured_namesrv, topic))
    deadline = time.monotonic() + 15  # the broker reloads at once; the nameserver within its reload interval
    while True:
        try:
            signed_send(secured_namesrv, "newbie", "newbie-secret-1", "acl-edited")
            break
        except PymqError:
            assert time.monotonic() < deadline, "the new account was never accepted"
            time.sleep(0.5)

    browser.go("/accounts?edit=newbie")  # edit: the secret field stays empty (the secret is kept)
    assert browser.css("#account [name=secret_key]").get_attribute("value") == ""
    assert browser.css("#account [name=topic_perms]").get_attribute("value") == "acl-edited=PUB"
    browser.css("#account [name=admin]").click()
    browser.submit("#account button")
    assert browser.text("#flash") == "account newbie updated on broker-s/0"
    assert next(r.text for r in browser.all("#accounts tbody tr") if r.text.startswith("newbie")).startswith(
        "newbie yes"
    )

    forge(browser, "/accounts/save", {"access_key": "csrf-victim", "secret_key": "victim-secret"}, with_csrf=False)
    assert browser.text("h1") == "Refused" and "CSRF" in browser.text("#error")

    browser.go("/accounts")
    row = next(r for r in browser.all("#accounts tbody tr") if r.text.startswith("newbie"))
    browser.click_through(row.find_element("css selector", "form.delete button"))  # to the confirmation page
    browser.submit("#confirm button")
    assert browser.text("#flash") == "account newbie deleted from broker-s/0"
    assert "csrf-victim" not in browser.text("#accounts") and "newbie" not in browser.text("#accounts")

    browser.submit("header .who button")  # log out; a non-admin account cannot edit
    log_in(browser, "viewer", "viewer-secret")
    browser.go("/topics")
    forge(
        browser,
        "/accounts/save",
        {"access_key": "viewer", "secret_key": "viewer-secret", "admin": "yes"},
        with_csrf=True,
    )
    refusal = browser.text("#flash")
    assert "account viewer not saved" in refusal and "admin permission required" in refusal, refusal
    browser.shot("accounts-refused")
