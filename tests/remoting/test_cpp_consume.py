"""The RocketMQ C++ client (rocketmq-client-python 0.5.0rc2) consumes from real pymq daemons.

Messages are produced with pymq's own SDK (mixed clients) and read by the C++ push consumer
(clustering with two consumers sharing the queues, broadcasting, orderly) and by its pull
consumer, with body, tags, keys, user properties and reconsume count intact. The C++ push
consumer starts from the queues' ends (CONSUME_FROM_LAST_OFFSET, which the Python wrapper
cannot change), so each test waits until the consumers own their queues and a warm-up round
has gone through before it produces what it checks.

Bodies are compared byte for byte, but without NUL bytes: the wrapper's C API hands a
message's body over as a C string (``GetMessageBody`` returns ``char*``), cut at the first NUL.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pymq.client import Producer, broker_api
from pymq.client.admin import AdminClient
from pymq.client.send_result import SendResult
from pymq.errors import PymqError
from pymq.protocol.message import Message
from pymq.protocol.route import MessageQueue
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from tests.daemon_helpers import create_topic, wait_for_route
from tests.helpers import run_admin, wait_until, wait_until_async

from .conftest import SCRIPTS, run_script

pytestmark = pytest.mark.integration

BROKER = "broker-a"
QUEUES = 4
#: the HA listener on any free port; retries due after 200 ms at every level
BROKER_ENV = {"PYMQ_HA_PORT": "0", "PYMQ_STORE__MESSAGE_DELAY_LEVEL": " ".join(["200ms"] * 18)}


class Daemons:
    def __init__(self, tmp_path: Path, processes: list[DaemonProcess]) -> None:
        self.ns = namesrv_process(tmp_path).start()
        processes.append(self.ns)
        self.broker = broker_process(tmp_path, self.ns.address, BROKER, env=BROKER_ENV)
        processes.append(self.broker)
        self.broker.start()


@pytest.fixture
async def daemons(tmp_path: Path, processes: list[DaemonProcess]) -> Daemons:
    d = await asyncio.to_thread(Daemons, tmp_path, processes)
    return d


async def make_topic(d: Daemons, topic: str) -> None:
    await create_topic([d.broker], topic, QUEUES)
    await wait_for_route(d.ns.address, topic, 1)


class CppConsumer:
    """consume_push.py in its own process; what its listener got is read from its output file."""

    def __init__(
        self,
        python: Path,
        tmp: Path,
        namesrv: str,
        group: str,
        topic: str,
        expression: str,
        instance: str,
        *,
        model: str = "clustering",
        orderly: bool = False,
        fail_below: str = "0",
    ) -> None:
        self.instance = instance
        self.out = tmp / f"{instance}.jsonl"
        self.stop_file = tmp / f"{instance}.stop"
        home = self.home = tmp / f"home-{instance}"
        home.mkdir()
        self.log = open(tmp / f"{instance}.log", "wb")  # noqa: SIM115 - closed in stop()
        args = [namesrv, group, topic, expression, instance, model, "1" if orderly else "0"]
        self.proc = subprocess.Popen(
            [str(python), str(SCRIPTS / "consume_push.py"), *args, str(self.stop_file), str(self.out), "color"],
            env={**os.environ, "HOME": str(home), "FAIL_BELOW": fail_below},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def rows(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.endswith("}")]

    def received(self) -> list[dict[str, Any]]:
        """What the listener got, warm-up messages left out."""
        return [r for r in self.rows() if r["tags"] != "warm"]

    def client_log(self) -> str:
        """The C++ client's own log (under $HOME/logs/rocketmq-cpp)."""
        return "".join(p.read_text(errors="replace") for p in sorted(self.home.glob("logs/rocketmq-cpp/*.log*")))

    def stop(self) -> int:
        self.stop_file.touch()
        try:
            return self.proc.wait(60)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def consumers(cpp_python: Path, tmp_path: Path) -> Iterator[list[CppConsumer]]:
    started: list[CppConsumer] = []
    yield started
    for c in started:
        c.kill()


def start(
    started: list[CppConsumer], python: Path, tmp: Path, d: Daemons, group: str, topic: str, expr: str, instance: str,
    **kw: Any,
) -> CppConsumer:  # fmt: skip
    c = CppConsumer(python, tmp, d.ns.address, group, topic, expr, instance, **kw)
    started.append(c)
    return c


async def wait_owning(namesrv: str, group: str, instances: list[str]) -> None:
    """Every queue pulled, and by the instances named (each owns at least one): the rebalance is done."""

    async def done() -> bool:
        async with AdminClient(namesrv) as admin:
            try:
                rows = (await admin.consumer_progress(group))["queues"]
            except Exception:
                return False
        owners = [str(r.get("clientId") or "").rpartition("@")[2] for r in rows if not r["topic"].startswith("%")]
        return len(owners) == QUEUES and set(owners) == set(instances)

    await wait_until_async(done, timeout=60, interval=0.3, what=f"{instances} owning the queues of {group}")


async def warm_up(producer: Producer, topic: str, consumers: list[CppConsumer], *, each: bool) -> None:
    """Send a round of messages to every queue until one round is seen whole (by each consumer, if ``each``)."""

    def seen(c: CppConsumer) -> set[str]:
        return {r["body"] for r in c.rows()}

    def whole(bodies: set[str]) -> bool:
        if each:
            return all(bodies <= seen(c) for c in consumers)
        return bodies <= set().union(*(seen(c) for c in consumers))

    for n in range(40):
        bodies = set()
        for q in range(QUEUES):
            body = f"warm-{n}-{q}"
            await producer.send(Message(topic, body.encode(), tags="warm"), queue=MessageQueue(topic, BROKER, q))
            bodies.add(body.encode().hex())

        try:
            await wait_until(lambda b=frozenset(bodies): whole(set(b)), timeout=3, interval=0.1)
            return
        except AssertionError:
            continue
    raise AssertionError("no warm-up round reached the consumers")


def random_bodies(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [bytes(rnd.randrange(1, 256) for _ in range(rnd.randrange(1, 3000))) for _ in range(n)]


async def produce(producer: Producer, topic: str, tags: list[str], bodies: list[bytes]) -> list[SendResult]:
    out = []
    for i, (tag, body) in enumerate(zip(tags, bodies, strict=True)):
        msg = Message(topic, body, tags=tag, keys=[f"key-{i}"])
        msg.properties["color"] = f"c{i}"
        out.append(await producer.send(msg))
    return out


def check_rows(rows: list[dict[str, Any]], sent: dict[str, tuple[int, SendResult, bytes, str]], topic: str) -> None:
    """Each row is one sent message as it was sent: body byte for byte, tags, keys, property, queue, offset."""
    for r in rows:
        i, result, body, tag = sent[r["id"]]
        assert bytes.fromhex(r["body"]) == body, f"message {i}: body differs"
        assert (r["topic"], r["tags"], r["keys"], r["props"]["color"]) == (topic, tag, f"key-{i}", f"c{i}")
        assert (r["queue_id"], r["queue_offset"]) == (result.message_queue.queueId, result.queue_offset)
        assert r["reconsume_times"] == 0 and r["store_timestamp"] >= r["born_timestamp"] > 0


async def test_clustering_two_cpp_consumers_share_the_queues_and_filter_by_tag(
    daemons: Daemons, consumers: list[CppConsumer], cpp_python: Path, tmp_path: Path
) -> None:
    topic, group = "CppOrders", "CG_CPP_CLUSTER"
    await make_topic(daemons, topic)
    for name in ("c1", "c2"):
        start(consumers, cpp_python, tmp_path, daemons, group, topic, "TagA || TagB || warm", name)
    await wait_owning(daemons.ns.address, group, ["c1", "c2"])
    async with Producer(daemons.ns.address) as producer:
        await warm_up(producer, topic, consumers, each=False)
        tags = ["TagA", "TagB", "TagC"] * 12
        bodies = random_bodies(len(tags), seed=30)
        results = await produce(producer, topic, tags, bodies)
    sent = {r.msg_id: (i, r, bodies[i], tags[i]) for i, r in enumerate(results) if tags[i] != "TagC"}

    def got() -> list[dict[str, Any]]:
        return [r for c in consumers for r in c.received()]

    await wait_until(lambda: len(got()) >= len(sent), timeout=30, interval=0.2, what="the TagA/TagB messages")
    await asyncio.sleep(1)  # anything more (a TagC, a duplicate) would show up now
    rows = got()
    assert sorted(r["id"] for r in rows) == sorted(sent), "each TagA/TagB message exactly once, no TagC"
    check_rows(rows, sent, topic)
    by_instance = {c.instance: {r["queue_id"] for r in c.received()} for c in consumers}
    assert all(by_instance.values()), by_instance  # both consumed
    assert not by_instance["c1"] & by_instance["c2"], by_instance  # a queue belongs to one of them

    # The group's offsets reach the queues' ends (pulls carry commits; the client also updates them).
    async with AdminClient(daemons.ns.address) as admin:

        async def caught_up() -> bool:
            progress = await admin.consumer_progress(group, topic)
            return progress["totalLag"] == 0 and len(progress["queues"]) == QUEUES

        await wait_until_async(caught_up, timeout=30, interval=0.5, what="committed offsets at the queues' ends")
        info = await admin.consumer_connection(group)
    conns = info["connections"]
    assert sorted(c["clientId"].rpartition("@")[2] for c in conns) == ["c1", "c2"]
    assert {(c["language"], c["protocol"]) for c in conns} == {("CPP", "remoting")}
    assert all(isinstance(c["version"], int) and c["version"] > 0 for c in conns)
    assert info["messageModel"] == "CLUSTERING" and info["consumeType"] == "CONSUME_PASSIVELY"
    assert {s["topic"]: s["subString"] for s in info["subscriptions"]}[topic] == "TagA || TagB || warm"
    code, out, err = await run_admin(daemons.ns.address, "consumer-connection", "--group", group)
    assert code == 0, err
    table = [line.split() for line in out.splitlines()]
    assert any(r[-2:] == ["VERSION", "PROTOCOL"] for r in table), out
    assert sum(1 for r in table if len(r) == 5 and r[2] == "CPP" and r[4] == "remoting") == 2, out
    code, out, err = await run_admin(daemons.ns.address, "consumer-progress", "--group", group, "--topic", topic)
    assert code == 0, err
    owners = {line.split()[-1].rpartition("@")[2] for line in out.splitlines() if line.startswith(topic)}
    assert owners == {"c1", "c2"} and "total lag: 0" in out, out

    for c in consumers:
        assert c.stop() == 0
    # their unregister takes them off the group at once
    async with AdminClient(daemons.ns.address) as admin:

        async def gone() -> bool:
            try:
                return not (await admin.consumer_connection(group))["connections"]
            except PymqError as exc:  # only "nobody of this group is connected" counts as gone
                text = str(exc)
                return f"no consumer of group {group} is connected" in text or "no broker knows" in text

        await wait_until_async(gone, timeout=10, what="the C++ consumers unregistered")


async def test_broadcasting_every_cpp_consumer_gets_every_message(
    daemons: Daemons, consumers: list[CppConsumer], cpp_python: Path, tmp_path: Path
) -> None:
    topic, group = "CppNews", "CG_CPP_BROADCAST"
    await make_topic(daemons, topic)
    for name in ("b1", "b2"):
        start(consumers, cpp_python, tmp_path, daemons, group, topic, "*", name, model="broadcasting")
    async with AdminClient(daemons.ns.address) as admin:

        async def both() -> bool:
            try:
                return len((await admin.consumer_connection(group))["connections"]) == 2
            except Exception:
                return False

        await wait_until_async(both, timeout=60, interval=0.3, what="both broadcasting consumers registered")
        assert (await admin.consumer_connection(group))["messageModel"] == "BROADCASTING"
    async with Producer(daemons.ns.address) as producer:
        await warm_up(producer, topic, consumers, each=True)
        tags = ["news"] * 12
        bodies = random_bodies(len(tags), seed=31)
        results = await produce(producer, topic, tags, bodies)
    sent = {r.msg_id: (i, r, bodies[i], tags[i]) for i, r in enumerate(results)}
    await wait_until(
        lambda: all(len(c.received()) >= len(sent) for c in consumers), timeout=30, interval=0.2, what="every message"
    )
    for c in consumers:
        rows = c.received()
        assert sorted(r["id"] for r in rows) == sorted(sent), c.instance
        check_rows(rows, sent, topic)
        assert c.stop() == 0


async def test_orderly_cpp_consumers_lock_their_queues_and_read_each_in_order(
    daemons: Daemons, consumers: list[CppConsumer], cpp_python: Path, tmp_path: Path
) -> None:
    topic, group = "CppSteps", "CG_CPP_ORDERLY"
    await make_topic(daemons, topic)
    for name in ("o1", "o2"):
        start(consumers, cpp_python, tmp_path, daemons, group, topic, "*", name, orderly=True)
    await wait_owning(daemons.ns.address, group, ["o1", "o2"])
    async with Producer(daemons.ns.address) as producer:
        await warm_up(producer, topic, consumers, each=False)
        results = []
        for i in range(40):
            order = i % QUEUES
            msg = Message(topic, f"order-{order}-step-{i // QUEUES}".encode(), tags="step", keys=[f"order-{order}"])
            results.append(await producer.send(msg, queue=MessageQueue(topic, BROKER, order)))

    def got() -> list[dict[str, Any]]:
        return [r for c in consumers for r in c.received()]

    await wait_until(lambda: len(got()) >= len(results), timeout=60, interval=0.2, what="the ordered messages")
    for c in consumers:
        per_queue: dict[int, list[str]] = {}
        for r in c.received():
            per_queue.setdefault(r["queue_id"], []).append(bytes.fromhex(r["body"]).decode())
        for qid, steps in per_queue.items():
            assert steps == [f"order-{qid}-step-{s}" for s in range(10)], (c.instance, qid, steps)
    owners = {c.instance: {r["queue_id"] for r in c.received()} for c in consumers}
    assert all(owners.values()) and not owners["o1"] & owners["o2"], owners
    for c in consumers:
        assert c.stop() == 0


async def test_cpp_pull_consumer_reads_every_queue_with_tag_filter_and_pull_statuses(
    daemons: Daemons, cpp_python: Path, tmp_path: Path
) -> None:
    topic = "CppPulled"
    await make_topic(daemons, topic)
    tags = ["TagA", "TagB", "TagB"] * 8  # every queue gets both tags
    bodies = random_bodies(len(tags), seed=32)
    async with Producer(daemons.ns.address) as producer:
        results = await produce(producer, topic, tags, bodies)
    proc = await asyncio.to_thread(
        run_script, cpp_python, "consume_pull.py", daemons.ns.address, "CG_CPP_PULL", topic, "TagA", home=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(q[2] for q in out["queues"]) == list(range(QUEUES))
    assert {q[1] for q in out["queues"]} == {BROKER}
    wanted = {r.msg_id: (i, r) for i, r in enumerate(results) if tags[i] == "TagA"}
    assert sorted(m["id"] for m in out["messages"]) == sorted(wanted)
    for m in out["messages"]:
        i, result = wanted[m["id"]]
        assert bytes.fromhex(m["body"]) == bodies[i]
        assert (m["tags"], m["keys"], m["color"]) == ("TagA", f"key-{i}", f"c{i}")
        assert (m["queue_id"], m["queue_offset"], m["reconsume_times"]) == (
            result.message_queue.queueId,
            result.queue_offset,
            0,
        )
    for qid in range(QUEUES):
        pulls = [p for p in out["pulls"] if p[0] == qid]
        end = sum(1 for r in results if r.message_queue.queueId == qid)
        assert pulls[0][2] == "FOUND" and pulls[0][3] == end and pulls[0][5] == end  # nextBeginOffset, maxOffset
        assert pulls[-2][2] == "NO_NEW_MSG", pulls
        # far past the end: RocketMQ's store corrects to the min offset when it is 0 (nextOffsetCorrection)
        assert pulls[-1][2:] == ["OFFSET_ILLEGAL", 0, 0, end], pulls


async def test_a_message_pymq_sent_back_reaches_the_cpp_consumer_with_its_reconsume_count(
    daemons: Daemons, consumers: list[CppConsumer], cpp_python: Path, tmp_path: Path
) -> None:
    """pymq's retry state read by a 4.x client: the C++ consumer gets the retry (%RETRY%group) copy
    of a message with reconsumeTimes 1 and everything else as it was sent."""
    topic, group = "CppRetried", "CG_CPP_RETRY"
    await make_topic(daemons, topic)
    c = start(consumers, cpp_python, tmp_path, daemons, group, topic, "*", "r1")
    await wait_owning(daemons.ns.address, group, ["r1"])
    async with Producer(daemons.ns.address) as producer:
        await warm_up(producer, topic, consumers, each=True)
        body = random_bodies(1, seed=33)[0]
        [result] = await produce(producer, topic, ["TagR"], [body])
    await wait_until(lambda: len(c.received()) == 1, timeout=30, what="the message, first time")
    # what a pymq consumer of the group does with a message it failed (CONSUMER_SEND_MSG_BACK, native)
    async with RpcClient() as rpc:
        back = broker_api.send_msg_back(
            group, result.commit_log_offsets[0], result.msg_id, topic, delay_level=1, max_reconsume_times=16
        )
        await rpc.invoke_ok(daemons.broker.address, back)
    await wait_until(lambda: len(c.received()) == 2, timeout=30, what="the retried message")
    first, again = c.received()
    assert (first["reconsume_times"], again["reconsume_times"]) == (0, 1)
    assert again["id"] == first["id"] == result.msg_id
    assert again["topic"] == topic  # the client restores the topic from RETRY_TOPIC
    assert bytes.fromhex(again["body"]) == body
    assert (again["tags"], again["keys"], again["props"]["color"]) == ("TagR", "key-0", "c0")
    assert c.stop() == 0


async def test_cpp_consumer_retries_through_its_send_back_then_succeeds(
    daemons: Daemons, consumers: list[CppConsumer], cpp_python: Path, tmp_path: Path
) -> None:
    """RECONSUME_LATER twice: the client's CONSUMER_SEND_MSG_BACK (36) puts the message on %RETRY%group with
    reconsumeTimes 1, then 2 (due after the 200 ms levels), and the client reads it back each time."""
    topic, group = "CppRetryLoop", "CG_CPP_RETRY_LOOP"
    await make_topic(daemons, topic)
    c = start(consumers, cpp_python, tmp_path, daemons, group, topic, "TagR || warm", "f1", fail_below="2")
    await wait_owning(daemons.ns.address, group, ["f1"])
    async with Producer(daemons.ns.address) as producer:
        await warm_up(producer, topic, consumers, each=True)
        body = random_bodies(1, seed=34)[0]
        [result] = await produce(producer, topic, ["TagR"], [body])
    await wait_until(lambda: len(c.received()) >= 3, timeout=60, interval=0.2, what="three deliveries")
    await asyncio.sleep(1)  # a fourth would show up now
    rows = c.received()
    assert [r["reconsume_times"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert (r["id"], r["topic"], r["tags"], r["keys"]) == (result.msg_id, topic, "TagR", "key-0")
        assert bytes.fromhex(r["body"]) == body and r["props"]["color"] == "c0"
    assert c.stop() == 0


async def test_cpp_consumer_that_always_fails_dead_letters_after_max_reconsume_times(
    daemons: Daemons, consumers: list[CppConsumer], cpp_python: Path, tmp_path: Path
) -> None:
    """The C++ client's maxReconsumeTimes (16): 17 deliveries, then pymq's retry policy moves the
    message to %DLQ%group, where pymq's admin reads it with its body."""
    topic, group = "CppDoomed", "CG_CPP_DLQ"
    await make_topic(daemons, topic)
    c = start(consumers, cpp_python, tmp_path, daemons, group, topic, "TagD || warm", "d1", fail_below="always")
    await wait_owning(daemons.ns.address, group, ["d1"])
    async with Producer(daemons.ns.address) as producer:
        await warm_up(producer, topic, consumers, each=True)
        body = random_bodies(1, seed=35)[0]
        [result] = await produce(producer, topic, ["TagD"], [body])
    async with AdminClient(daemons.ns.address) as admin:

        async def dead() -> bool:
            return bool(await admin.dlq_list(group))

        await wait_until_async(dead, timeout=90, interval=0.5, what="the message in %DLQ%")
        [letter] = await admin.dlq_list(group)
    rows = c.received()
    assert [r["reconsume_times"] for r in rows] == list(range(17)), [r["reconsume_times"] for r in rows]
    assert letter.body == body and letter.msg_id == result.msg_id and letter.tags == "TagD"
    await asyncio.sleep(1)
    assert len(c.received()) == 17  # nothing after the dead letter
    assert c.stop() == 0


async def test_when_a_cpp_consumer_leaves_the_other_takes_its_queues_at_once(
    daemons: Daemons, consumers: list[CppConsumer], cpp_python: Path, tmp_path: Path
) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED reaches the C++ client: the one left rebalances within seconds (its own
    periodic rebalance is every 20 s) and reads what is produced next from every queue."""
    topic, group = "CppHandover", "CG_CPP_HANDOVER"
    await make_topic(daemons, topic)
    for name in ("h1", "h2"):
        start(consumers, cpp_python, tmp_path, daemons, group, topic, "*", name)
    await wait_owning(daemons.ns.address, group, ["h1", "h2"])
    h1, h2 = consumers
    notified = h1.client_log().count(f"notifyConsumerIdsChanged:{group}")
    assert await asyncio.to_thread(h2.stop) == 0
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    async with Producer(daemons.ns.address) as producer:
        # h1 owns every queue once a round sent to each queue reaches it
        await warm_up(producer, topic, [h1], each=True)
        took = loop.time() - t0
        bodies = random_bodies(8, seed=36)
        results = await produce(producer, topic, ["after"] * 8, bodies)
    assert took < 15, f"h1 took {took:.1f} s to take over h2's queues"
    # the client says why it rebalanced: the broker's push (the C++ client logs each one it handles)
    assert h1.client_log().count(f"notifyConsumerIdsChanged:{group}") > notified
    sent = {r.msg_id: (i, r, bodies[i], "after") for i, r in enumerate(results)}
    await wait_until(lambda: len(h1.received()) >= len(sent), timeout=30, what="every message at h1")
    check_rows(h1.received(), sent, topic)
    assert {r["queue_id"] for r in h1.received()} == set(range(QUEUES))
    assert h1.stop() == 0
