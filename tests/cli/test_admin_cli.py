"""Every pymq-admin command against real daemons (one nameserver, two brokers)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from pymq.client import ConsumeFromWhere, ConsumeResult, Message, Producer, PushConsumer
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.helpers import wait_until, wait_until_sync

pytestmark = pytest.mark.integration

LEVELS = " ".join(f"{(i + 1) * 100}ms" for i in range(18))


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("admin")
    env = {"PYMQ_STORE__MESSAGE_DELAY_LEVEL": LEVELS}
    procs: list[DaemonProcess] = []
    try:
        ns = namesrv_process(work).start()
        procs.append(ns)
        brokers = []
        for name in ("broker-a", "broker-b"):
            b = broker_process(work, ns.address, name, "--register-interval", "0.5", env=env).start()
            procs.append(b)
            brokers.append(b)
        yield ns, brokers
    finally:
        for p in reversed(procs):
            p.stop()


def run(ns: DaemonProcess, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.admin", "--namesrv", ns.address, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ok:
        assert out.returncode == 0, out.stderr
    return out


def js(ns: DaemonProcess, *args: str):
    return json.loads(run(ns, "--json", *args).stdout)


def make_topic(ns: DaemonProcess, topic: str, queues: int = 2) -> None:
    run(ns, "topic-create", "--topic", topic, "--queues", str(queues))
    wait_until_sync(lambda: topic in js(ns, "topic-list"), what=f"{topic} routed")


FAST = {
    "rebalance_interval_seconds": 1.0,
    "heartbeat_interval_seconds": 1.0,
    "persist_offset_interval_seconds": 0.3,
}


def test_topic_commands(daemons) -> None:
    """topic-create/list/route/status/delete and cluster-list work, in tables and JSON."""
    ns, _ = daemons
    make_topic(ns, "t-admin", 3)
    assert "broker-a" in run(ns, "cluster-list").stdout
    route = js(ns, "topic-route", "--topic", "t-admin")
    assert sorted(q["brokerName"] for q in route["queueDatas"]) == ["broker-a", "broker-b"]
    status = js(ns, "topic-status", "--topic", "t-admin")
    assert len(status) == 6 and all(r["maxOffset"] == 0 for r in status)
    run(ns, "topic-delete", "--topic", "t-admin")
    wait_until_sync(lambda: "t-admin" not in js(ns, "topic-list"), what="topic gone")


def test_message_commands(daemons) -> None:
    """send, consume, query-key, query-id (both id kinds), print-message (and --raw)."""
    ns, _ = daemons
    make_topic(ns, "t-msg")
    sent = js(ns, "send", "--topic", "t-msg", "--body", "hello admin", "--tags", "A", "--keys", "order-7")
    got = js(ns, "consume", "--topic", "t-msg", "--group", "cli-g", "--count", "1", "--wait", "3")
    assert [(m["body"], m["bodyBase64"]) for m in got] == [("hello admin", "aGVsbG8gYWRtaW4=")]
    assert js(ns, "consume", "--topic", "t-msg", "--group", "cli-g", "--count", "1", "--wait", "1") == []  # committed
    found = js(ns, "query-key", "--topic", "t-msg", "--key", "order-7")
    assert [m["msgId"] for m in found] == [sent["msgId"]]
    by_offset_id = js(ns, "query-id", "--id", sent["offsetMsgId"])
    by_uniq = js(ns, "query-id", "--id", sent["msgId"], "--topic", "t-msg")
    assert by_offset_id["msgId"] == by_uniq["msgId"] == sent["msgId"]
    shown = js(
        ns,
        "print-message",
        "--topic",
        "t-msg",
        "--queue",
        str(sent["queueId"]),
        "--offset",
        "0",
        "--broker",
        sent["broker"],
    )
    assert shown["bodyPreview"] == "hello admin" and shown["tags"] == "A"
    raw = run(
        ns,
        "print-message",
        "--topic",
        "t-msg",
        "--queue",
        str(sent["queueId"]),
        "--offset",
        "0",
        "--broker",
        sent["broker"],
        "--raw",
    )
    assert raw.stdout == "hello admin"


def test_broker_commands(daemons) -> None:
    """broker-status reports store figures; update-broker-config changes a runtime setting."""
    ns, (a, _) = daemons
    status = js(ns, "broker-status", "--broker", a.address)
    assert status["brokerName"] == "broker-a" and status["commitLogMaxOffset"] >= 0 and "diskRatio" in status
    out = js(ns, "update-broker-config", "--broker", a.address, "--set", "auto_create_topic=true")
    assert out[a.address] == {"auto_create_topic": True}
    bad = run(ns, "update-broker-config", "--broker", a.address, "--set", "port=1", ok=False)
    assert bad.returncode == 1 and "not changeable" in bad.stderr


async def test_group_commands_and_dead_letters(daemons) -> None:
    """consumer-connection/progress, reset-offset (consumers follow), group retry limit, dlq-list, dlq-resend."""
    ns, _ = daemons
    make_topic(ns, "t-group", 2)
    js(ns, "update-subscription-group", "--group", "g-admin", "--set", "retryMaxTimes=2")
    seen: list = []
    consumer = PushConsumer(ns.address, "g-admin", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)
    consumer.subscribe("t-group", "*")

    @consumer.listener
    async def on(msgs):
        seen.extend(msgs)
        return ConsumeResult.RECONSUME_LATER if msgs[0].body == b"poison" else ConsumeResult.SUCCESS

    async with consumer, Producer(ns.address) as producer:
        for i in range(6):
            await producer.send(Message("t-group", f"m{i}".encode()))
        poison = await producer.send(Message("t-group", b"poison", keys=["bad-1"]))
        await wait_until(lambda: len([m for m in seen if m.body != b"poison"]) >= 6, what="6 consumed")
        conn = await asyncio.to_thread(js, ns, "consumer-connection", "--group", "g-admin")
        assert len(conn["connections"]) == 1 and conn["messageModel"] == "CLUSTERING"
        assert {s["topic"] for s in conn["subscriptions"]} == {"t-group", "%RETRY%g-admin"}
        await asyncio.sleep(0.8)  # offsets committed to the brokers
        progress = await asyncio.to_thread(js, ns, "consumer-progress", "--group", "g-admin", "--topic", "t-group")
        assert progress["totalLag"] == 0 and len(progress["queues"]) == 4
        assert {r["clientId"] for r in progress["queues"] if r["brokerOffset"]} == {consumer.instance.client_id}
        # The group's retryMaxTimes (2) applies: initial try + 2 retries, then the dead-letter queue.
        await wait_until(lambda: len([m for m in seen if m.body == b"poison"]) >= 3, timeout=10, what="retries")
        letters: list = []

        def dlq() -> list:
            letters[:] = js(ns, "dlq-list", "--group", "g-admin")
            return letters

        await wait_until(lambda: bool(dlq()), timeout=10, interval=0.3, what="dead letter")
        assert [m["msgId"] for m in letters] == [poison.msg_id] and letters[0]["originTopic"] == "t-group"
        assert len([m for m in seen if m.body == b"poison"]) == 3
        before = len(seen)
        reset = await asyncio.to_thread(
            js, ns, "reset-offset", "--group", "g-admin", "--topic", "t-group", "--timestamp", "-2"
        )
        assert sum(1 for t in reset.values() for _ in t) == 4
        await wait_until(lambda: len(seen) >= before + 7, timeout=10, what="redelivery after reset")
    fresh: list = []
    again = PushConsumer(ns.address, "g-fresh", consume_from_where=ConsumeFromWhere.LAST_OFFSET, **FAST)
    again.subscribe("t-group")

    @again.listener
    async def on2(msgs):
        fresh.extend(msgs)

    async with again:
        await asyncio.sleep(1.5)
        out = await asyncio.to_thread(js, ns, "dlq-resend", "--group", "g-admin", "--all")
        assert out["resent"] == [poison.msg_id]
        await wait_until(lambda: any(m.body == b"poison" for m in fresh), timeout=10, what="resent message")
    resent = next(m for m in fresh if m.body == b"poison")
    assert resent.keys == ["bad-1"] and resent.properties["DLQ_ORIGIN_MESSAGE_ID"] == poison.msg_id


async def test_consumer_progress_shows_pop_in_flight(daemons) -> None:
    from pymq.client import SimpleConsumer

    ns, _brokers = daemons
    await asyncio.to_thread(make_topic, ns, "t-pop")
    async with Producer(ns.address) as producer:
        for i in range(3):
            await producer.send(Message("t-pop", f"p{i}".encode()))
    consumer = SimpleConsumer(ns.address, "g-pop", await_duration=0)
    consumer.subscribe("t-pop")
    async with consumer:
        got: list = []
        for _ in range(50):
            got.extend(await consumer.receive(8, 60.0, await_duration=0.5))
            if len(got) >= 3:
                break
        assert len(got) == 3
        await consumer.ack(got[0])
        progress = await asyncio.to_thread(js, ns, "consumer-progress", "--group", "g-pop", "--topic", "t-pop")
        assert progress["totalInFlight"] == 2 and sum(r["inFlight"] for r in progress["queues"]) == 2
        human = (await asyncio.to_thread(run, ns, "consumer-progress", "--group", "g-pop")).stdout
        assert "IN FLIGHT" in human and "in flight: 2" in human
        for m in got[1:]:
            await consumer.ack(m)


def test_every_command_has_an_example() -> None:
    """--help of every pymq-admin command shows an example."""
    from pymq.cli.admin import main

    for name in main.commands:
        out = subprocess.run(
            [sys.executable, "-m", "pymq.cli.admin", name, "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ},
        )
        assert out.returncode == 0 and "Example" in out.stdout, name
