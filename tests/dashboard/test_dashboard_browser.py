"""The dashboard in a real browser (headless chromium) against real pymq daemons.

The tests share one cluster and one browser and run in file order: the topic created in one
is the topic the next ones send to, search and reset. Each page visited is screenshotted under
the pytest tmp dir (``dashboard-screens*``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import urllib.request
from typing import Any

import pytest

from pymq.client import broker_api
from pymq.client.admin import AdminClient
from pymq.client.sync import ConsumeFromWhere, ConsumeResult, Message, Producer, PushConsumer
from pymq.errors import PymqError
from pymq.protocol.message import MessageExt
from pymq.testing.processes import DaemonProcess
from tests.dashboard.browser import Browser

pytestmark = pytest.mark.integration

TOPIC = "dash-orders"
GROUP = "dash-group"
FAILING_GROUP = "dash-failing"


def admin_run(daemons: dict[str, DaemonProcess], action: Any) -> Any:
    """Run ``await action(admin)`` with an admin client of the test cluster (test set-up, not UI)."""

    async def main() -> Any:
        async with AdminClient(daemons["namesrv"].address) as admin:
            return await action(admin)

    return asyncio.run(main())


def flash(browser: Browser) -> str:
    """The message the last mutation left (the whole page's text if there is none: the assertion shows it)."""
    found = browser.all("#flash")
    return str(found[0].text) if found else browser.text("main")


def test_every_page_loads(browser: Browser) -> None:
    pages = {
        "/cluster": "Cluster",
        "/topics": "Topics",
        "/messages": "Messages",
        "/groups": "Consumer groups",
        "/producers": "Producers",
        "/dlq": "Dead letters",
        "/pending": "Pending",
        "/charts": "Charts",
        "/accounts": "ACL accounts",
    }
    for path, title in pages.items():
        browser.go(path)
        assert browser.text("h1").startswith(title), path
        browser.shot(path.strip("/"))
    browser.go("/cluster")
    master, slave = (r.text for r in browser.all("#brokers tbody tr"))
    assert "broker-a 0" in master and "ASYNC_MASTER" in master and "0.1.0" in master, master
    assert "broker-a 1" in slave and "SLAVE" in slave, slave


def test_system_topics_are_hidden_until_asked_for(browser: Browser) -> None:
    browser.go("/topics")
    assert "SCHEDULE_TOPIC_XXXX" not in browser.text("#topics")
    browser.css("#search [name=system]").click()
    browser.submit("#search button")
    assert "SCHEDULE_TOPIC_XXXX" in browser.text("#topics")


def test_create_a_topic_from_the_ui(browser: Browser, daemons: dict[str, DaemonProcess]) -> None:
    browser.go("/topics")
    browser.fill("#create-topic", topic=TOPIC, queues="4")
    browser.submit("#create-topic button")
    assert f"topic {TOPIC} created" in flash(browser)
    assert browser.text("h1") == f"Topic {TOPIC}"
    assert len(browser.all("#queues tbody tr")) == 4
    route = admin_run(daemons, lambda a: a.topic_route(TOPIC))
    assert [q.writeQueueNums for q in route.queueDatas] == [4]
    browser.go(f"/topics?q={TOPIC[:8]}")
    assert TOPIC in browser.text("#topics")


def test_a_topic_with_attributes_then_deleted_after_a_confirmation(
    browser: Browser, daemons: dict[str, DaemonProcess]
) -> None:
    browser.go("/topics")
    browser.fill("#create-topic", topic="dash-temp", queues="2", attributes="message.type=NORMAL")
    browser.css("#create-topic [name=perm_write]").click()  # read-only topic
    browser.submit("#create-topic button")
    assert "topic dash-temp created" in flash(browser)
    browser.go("/topics?q=dash-temp")
    row = browser.text("#topics tbody")
    assert "message.type=NORMAL" in row and " R- " in f" {row} ", row
    browser.go("/topics/dash-temp")
    browser.submit("#delete button")
    assert browser.text("h1") == "Delete topic dash-temp?"
    browser.submit("#confirm button")
    assert "topic dash-temp deleted" in flash(browser)
    assert "dash-temp" not in browser.text("#topics")
    assert "dash-temp" not in admin_run(daemons, lambda a: a.topic_configs())


def test_send_a_test_message_and_find_it_by_key_and_by_id(browser: Browser) -> None:
    body = json.dumps({"order": 1, "item": "coffee"})
    browser.go(f"/topics/{TOPIC}")
    browser.fill("#send", tags="paid", keys="order-1", body=body)
    browser.submit("#send button")
    sent = flash(browser)
    assert sent.startswith("sent: msgId"), sent
    words = sent.split()
    msg_id, offset_msg_id = words[2], words[4]
    assert "1" in [c.text for c in browser.all("#queues td.num")[2::3]]  # some queue's max offset is now 1
    browser.shot("topic")

    browser.go("/messages")
    browser.fill("#by-key", topic=TOPIC, key="order-1")
    browser.submit("#by-key button")
    found = browser.all("#found tbody tr")
    assert len(found) == 1 and msg_id in found[0].text and "paid" in found[0].text

    browser.go("/messages")
    browser.fill("#by-id", id=offset_msg_id)
    browser.submit("#by-id button")
    assert browser.text("h1") == f"Message {msg_id}"
    assert json.loads(browser.text("#body-text")) == {"order": 1, "item": "coffee"}
    browser.css("[data-tab=json]").click()
    assert '"item": "coffee"' in browser.text("#body-json")
    assert not browser.css("#body-text").is_displayed()
    browser.css("[data-tab=hex]").click()
    assert browser.text("#body-hex").startswith("00000000  7b 22 6f 72")
    assert "order-1" in browser.text("#properties")
    browser.shot("message")

    browser.go("/messages")  # by topic and time range (UTC, to the minute)
    browser.fill("#by-time", topic=TOPIC)
    begin = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 300))
    browser.driver.execute_script("arguments[0].value = arguments[1]", browser.css("#by-time [name=begin]"), begin)
    browser.submit("#by-time button")
    assert browser.text("h2:not(.card h2)").startswith(f"1 message(s) in {TOPIC} from {begin} to now")
    assert msg_id in browser.text("#found")

    browser.go("/messages")  # by unique id: needs the topic
    browser.fill("#by-id", id=msg_id, topic=TOPIC)
    browser.submit("#by-id button")
    assert offset_msg_id in browser.text("#summary")


def test_reset_a_group_offset_with_a_confirmation(browser: Browser, daemons: dict[str, DaemonProcess]) -> None:
    async def consumed_everything(admin: AdminClient) -> None:
        await admin.update_subscription_group({"groupName": GROUP})
        addr = next(iter((await admin.master_addrs()).values()))
        for row in await admin.topic_status(TOPIC):
            await admin.broker_call(
                addr, broker_api.update_consumer_offset(GROUP, TOPIC, row["queueId"], row["maxOffset"])
            )

    admin_run(daemons, consumed_everything)
    browser.go(f"/groups/{GROUP}")
    assert browser.text("#total-lag") == "0"
    assert "retryMaxTimes 16" in browser.text("#config")
    browser.css("#reset [value=earliest]").click()
    browser.submit("#reset button")
    assert browser.text("h1") == "Reset offsets?"
    assert "earliest" in browser.text(".flash.warn")
    browser.shot("reset-confirm")
    browser.submit("#confirm button")
    assert f"group {GROUP} reset on {TOPIC} to earliest" in flash(browser)
    assert browser.text("#total-lag") == "1"
    browser.shot("group")
    browser.go("/groups")
    assert GROUP in browser.text("#groups")


def lag_chart(browser: Browser, group: str, last: str, timeout: float = 10.0) -> Any:
    """The group's lag chart once its latest point reads ``last`` (the dashboard polls every second)."""
    deadline = time.monotonic() + timeout
    while True:
        browser.go("/charts")
        charts = {c.get_attribute("data-series"): c for c in browser.all("figure.chart")}
        chart = charts.get(f"lag:{group}")
        if chart is not None and chart.find_element("css selector", ".last").text == last:
            return chart
        assert time.monotonic() < deadline, f"no lag chart at {last} for {group}: {list(charts)}"
        time.sleep(0.5)


def test_the_lag_chart_moves(browser: Browser, daemons: dict[str, DaemonProcess]) -> None:
    """The lag of 1 the reset made reaches the chart; the group catches up and the chart comes back to 0."""
    points = lag_chart(browser, GROUP, "1.0").find_element("css selector", "polyline").get_attribute("points")
    assert points and "put:broker-a/0" in [c.get_attribute("data-series") for c in browser.all("figure.chart")]

    async def catch_up(admin: AdminClient) -> None:
        addr = next(iter((await admin.master_addrs()).values()))
        for row in await admin.topic_status(TOPIC):
            await admin.broker_call(
                addr, broker_api.update_consumer_offset(GROUP, TOPIC, row["queueId"], row["maxOffset"])
            )

    admin_run(daemons, catch_up)
    chart = lag_chart(browser, GROUP, "0.0")
    assert "max 1.0" in chart.text
    ys = [
        float(p.split(",")[1]) for p in chart.find_element("css selector", "polyline").get_attribute("points").split()
    ]
    assert min(ys) < max(ys)  # the line went up and came down: it is not flat
    topic_in = next(c for c in browser.all("figure.chart") if c.get_attribute("data-series") == f"tput:{TOPIC}")
    peak = re.search(r"max ([0-9.]+)", topic_in.text)
    assert peak and float(peak.group(1)) > 0, topic_in.text  # the test message's send, per second
    browser.shot("charts")


def test_a_dead_letter_is_resent_from_the_ui(browser: Browser, daemons: dict[str, DaemonProcess]) -> None:
    """A real consumer fails the message (no retries allowed): it lands in %DLQ%; the UI resends it."""
    failed: list[str] = []

    def fail(msgs: list[MessageExt]) -> ConsumeResult:
        failed.extend(m.msg_id for m in msgs)
        return ConsumeResult.RECONSUME_LATER

    consumer = PushConsumer(
        daemons["namesrv"].address,
        FAILING_GROUP,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        max_reconsume_times=0,
    )
    consumer.subscribe(TOPIC)
    consumer.register_listener(fail)
    with consumer:
        deadline = time.monotonic() + 20
        while not failed:
            assert time.monotonic() < deadline, "the consumer never received the message"
            time.sleep(0.1)
        msg_id = failed[0]
        browser.go(f"/groups/{FAILING_GROUP}")  # the connected client, with its language and version
        clients = browser.text("#clients")
        assert "PYTHON" in clients and "127.0.0.1" in clients, clients
        browser.shot("group-with-client")
        browser.css("#clients a.stacks").click()  # the client's running info, with its stacks
        assert TOPIC in browser.text("#process-queues"), browser.text("main")
        assert "Asyncio tasks (" in browser.text("#stacks")
        browser.shot("client-running-info")
        while not admin_run(daemons, lambda a: a.dlq_list(FAILING_GROUP)):  # sent back before the consumer stops
            assert time.monotonic() < deadline, "the failed message never reached the dead-letter queue"
            time.sleep(0.1)
    deadline = time.monotonic() + 10
    while True:  # the DLQ topic's route reaches the nameserver with the broker's next registration
        browser.go(f"/dlq?group={FAILING_GROUP}")
        if browser.all("#letters input[name=msg_id]"):
            break
        assert time.monotonic() < deadline, browser.text("main")
        time.sleep(0.5)
    assert msg_id in browser.text("#letters")
    browser.shot("dlq")
    browser.go("/groups")
    row = next(r for r in browser.all("#groups tbody tr") if r.text.startswith(FAILING_GROUP))
    assert row.find_element("css selector", "a[href^='/dlq']").text == "1"
    browser.shot("groups-populated")
    browser.go(f"/dlq?group={FAILING_GROUP}")
    export = browser.css("#export").get_attribute("href")
    with urllib.request.urlopen(export, timeout=10) as resp:
        lines = [json.loads(line) for line in resp.read().decode().splitlines()]
    assert [(x["msgId"], base64.b64decode(x["body"])) for x in lines] == [(msg_id, b'{"order": 1, "item": "coffee"}')]
    before = sum(r["maxOffset"] for r in admin_run(daemons, lambda a: a.topic_status(TOPIC)))
    browser.css("#letters input[name=msg_id]").click()
    browser.submit("#resend button[value=no]")
    assert f"resent 1 dead letter(s) of {FAILING_GROUP}: {msg_id}" in flash(browser)
    after = sum(r["maxOffset"] for r in admin_run(daemons, lambda a: a.topic_status(TOPIC)))
    assert after == before + 1

    browser.go(f"/messages/view?id={msg_id}&topic={TOPIC}")  # its trail shows the dead letter
    assert "dead letter" in browser.text("#trail") and FAILING_GROUP in browser.text("#trail")
    browser.shot("message-trail")


def test_a_mutation_without_the_csrf_token_is_refused(browser: Browser, daemons: dict[str, DaemonProcess]) -> None:
    browser.go("/topics")
    browser.driver.execute_script(
        """const f = document.createElement('form'); f.method = 'post'; f.action = '/topics/create';
        const t = document.createElement('input'); t.name = 'topic'; t.value = 'csrf-victim'; f.appendChild(t);
        const b = document.createElement('button'); b.id = 'forged'; f.appendChild(b);
        document.body.appendChild(f);"""
    )
    browser.submit("#forged")
    assert browser.text("h1") == "Refused"
    assert "CSRF" in browser.text("#error")
    assert "csrf-victim" not in admin_run(daemons, lambda a: a.topic_list())


def test_connected_producers_are_listed(browser: Browser, daemons: dict[str, DaemonProcess]) -> None:
    """A producer heartbeats its group to the brokers it knows (every 0.5 s here, 30 s by default)."""
    with Producer(daemons["namesrv"].address, "dash-producers", heartbeat_interval_seconds=0.5) as producer:
        producer.send(Message(TOPIC, b"from a producer that stays connected"))
        deadline = time.monotonic() + 10
        while True:
            browser.go("/producers")
            if "dash-producers" in browser.text("#producers"):
                break
            assert time.monotonic() < deadline, "the producer never showed up"
            time.sleep(0.3)
        table = browser.text("#producers")
        assert "PYTHON" in table and "broker-a" in table, table
        browser.shot("producers")


RESEND_GROUP = "dash-resend"


def test_a_message_is_resent_to_a_consumer_group_from_the_ui(
    browser: Browser, daemons: dict[str, DaemonProcess]
) -> None:
    """CONSUME_MESSAGE_DIRECTLY: the chosen client's listener consumes the message again, and its answer is shown."""
    seen: list[tuple[str, bytes]] = []

    def on(msgs: list[MessageExt]) -> ConsumeResult:
        seen.extend((m.msg_id, m.body) for m in msgs)
        return ConsumeResult.SUCCESS

    msg = admin_run(daemons, lambda a: a.query_key(TOPIC, "order-1"))[0]
    consumer = PushConsumer(daemons["namesrv"].address, RESEND_GROUP, heartbeat_interval_seconds=0.5)
    consumer.subscribe(TOPIC)
    consumer.register_listener(on)
    with consumer:

        async def connected(admin: AdminClient) -> list[str]:
            try:
                return [c["clientId"] for c in (await admin.consumer_connection(RESEND_GROUP))["connections"]]
            except PymqError:
                return []

        deadline = time.monotonic() + 15
        while not (clients := admin_run(daemons, connected)):
            assert time.monotonic() < deadline, "the consumer never connected"
            time.sleep(0.2)
        browser.go(f"/messages/view?id={msg.offset_msg_id}")
        # the trail's consumer groups: GROUP committed past it (test_the_lag_chart_moves caught it up)
        consumed = {r.text.split()[0]: r.text for r in browser.all("#consumed-by tbody tr")}
        assert consumed[GROUP].endswith(" consumed"), consumed
        browser.choose("#resend-pick", "group", RESEND_GROUP)
        browser.submit("#resend-pick button")
        assert [o.get_attribute("value") for o in browser.all("#resend option")] == ["", *clients]
        browser.choose("#resend", "client_id", clients[0])
        before = len(seen)
        browser.submit("#resend button")
        answer = flash(browser)
        assert answer.startswith(f"resent to {RESEND_GROUP}: client {clients[0]} (through broker-a)"), answer
        assert "consumed it (SUCCESS)" in answer and "CR_SUCCESS" in answer, answer
        assert seen[before:] == [(msg.msg_id, b'{"order": 1, "item": "coffee"}')]
        browser.shot("message-resend")
