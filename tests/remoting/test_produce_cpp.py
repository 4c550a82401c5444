"""The RocketMQ C++ client's producer against real pymq-namesrv / pymq-broker processes.

The client (rocketmq-client-python 0.5.0rc2's librocketmq) sends through the broker's
remoting translators (pymq.broker.remoting.produce); what it stored is read back with
pymq's own SDK: bodies byte for byte, tags, keys, user properties, delay levels, queues.
The broker auto-creates topics (the client's first send to a new topic goes through TBW102's
route, as with RocketMQ 4.9 and autoCreateTopicEnable=true).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, MessageExt, MessageQueue, PullConsumer
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.daemon_helpers import create_topic, wait_for_route

from .conftest import SCRIPTS, run_script

pytestmark = pytest.mark.integration

BROKER = "broker-a"
#: check-backs soon after a half message is stored, and many of them (a C++ producer heartbeats
#: the broker only every 30 s: its replacement is not known to the broker before that)
ENV = {
    "PYMQ_HA_PORT": "0",
    "PYMQ_TRANSACTION_TIMEOUT_SECONDS": "1",
    "PYMQ_TRANSACTION_CHECK_INTERVAL_SECONDS": "0.3",
    "PYMQ_TRANSACTION_CHECK_MAX": "500",
}


class Daemons:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[DaemonProcess] = []
        self.ns = namesrv_process(workdir).start()
        self.procs.append(self.ns)
        self.broker = broker_process(workdir, self.ns.address, BROKER, "--auto-create-topic", env=ENV)
        self.procs.append(self.broker)
        self.broker.start()

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemons]:
    d = Daemons(tmp_path_factory.mktemp("produce-cpp"))
    try:
        yield d
    finally:
        d.stop()


async def made_topic(d: Daemons, topic: str, queues: int = 4) -> None:
    await create_topic([d.broker], topic, queues)
    await wait_for_route(d.ns.address, topic, 1)


async def read_topic(d: Daemons, topic: str, queues: int, want: int, timeout: float = 10) -> list[MessageExt]:
    """What pymq's SDK pulls from ``topic`` from its start (waiting for ``want`` messages at most ``timeout`` s)."""
    pc = PullConsumer(d.ns.address, f"reader-{os.urandom(4).hex()}", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue(topic, BROKER, q) for q in range(queues)])
    out: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    async with pc:
        while len(out) < want and time.monotonic() < deadline:
            out.extend(await pc.poll(timeout=0.5))
    return out


def send(cpp_python: Path, d: Daemons, mode: str, messages: list[dict], group: str = "PG_PYMQ_PRODUCE") -> list[dict]:
    return send_to(cpp_python, d.ns.address, d.workdir, mode, messages, group)


def send_to(
    cpp_python: Path, namesrv: str, home: Path, mode: str, messages: list[dict], group: str = "PG_PYMQ_PRODUCE"
) -> list[dict]:
    """Run produce_send.py; its results, one per send (one for a batch)."""
    spec = json.dumps({"group": group, "messages": messages})
    proc = run_script(cpp_python, "produce_send.py", namesrv, mode, spec, home=home, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results: list[dict] = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    return results


def msg(topic: str, body: bytes, **kw: object) -> dict:
    return {"topic": topic, "body_hex": body.hex(), **kw}


BINARY = bytes(range(1, 256)) * 3 + b"\xff\xfe end"  # no NUL: the C API's tags/keys are C strings, bodies not


async def test_first_sync_send_to_a_new_topic_auto_creates_it_and_arrives_intact(
    cpp_python: Path, daemons: Daemons
) -> None:
    results = await asyncio.to_thread(
        send,
        cpp_python,
        daemons,
        "sync",
        [msg("CppAutoNew", BINARY, tags="TagA", keys="k1 k2", props={"color": "red", "n": "1"})],
    )
    assert len(results) == 1 and results[0].get("status") == 0, results
    got = await read_topic(daemons, "CppAutoNew", 8, 1)
    assert len(got) == 1
    m = got[0]
    assert m.body == BINARY
    assert (m.tags, m.keys) == ("TagA", ["k1", "k2"])
    assert m.properties["color"] == "red" and m.properties["n"] == "1"
    # the C++ client's msgId is the UNIQ_KEY it set; its offset the queue offset
    assert m.properties["UNIQ_KEY"] == results[0]["msg_id"] == m.msg_id
    assert results[0]["offset"] == m.queue_offset == 0
    host = m.born_host.rpartition(":")[0]
    assert host == "127.0.0.1"


async def test_a_body_the_client_compresses_is_read_back_intact(cpp_python: Path, daemons: Daemons) -> None:
    """The C++ client deflates bodies of 4 KiB and more (sysFlag 0x1); pymq's SDK inflates them."""
    await made_topic(daemons, "CppBig", 1)
    big = b"".join(i.to_bytes(4, "big") for i in range(1, 5000)) + bytes(range(1, 256)) * 8
    results = await asyncio.to_thread(send, cpp_python, daemons, "sync", [msg("CppBig", big, tags="big")])
    assert results[0].get("status") == 0, results
    [m] = await read_topic(daemons, "CppBig", 1, 1)
    assert m.sys_flag & 0x1  # stored compressed, as the client sent it
    assert m.body == big and m.tags == "big"


async def test_sync_async_oneway_and_sharding_sends_arrive(cpp_python: Path, daemons: Daemons) -> None:
    await made_topic(daemons, "CppModes", 4)
    sent: dict[str, list[bytes]] = {}
    for mode in ("sync", "async", "oneway", "sharding"):
        bodies = [f"{mode}-{i}".encode() for i in range(3)]
        sent[mode] = bodies
        results = await asyncio.to_thread(
            send,
            cpp_python,
            daemons,
            mode,
            [msg("CppModes", b, tags=mode, keys=b.decode(), sharding="s") for b in bodies],
        )
        assert len(results) == 3 and all("error" not in r for r in results), (mode, results)
        if mode in ("sync", "async", "sharding"):
            assert all(r["status"] == 0 and len(r["msg_id"]) == 32 for r in results), results
    got = await read_topic(daemons, "CppModes", 4, 12)
    by_tag: dict[str, list[MessageExt]] = {}
    for m in got:
        assert m.tags is not None
        by_tag.setdefault(m.tags, []).append(m)
    for mode, bodies in sent.items():
        assert sorted(m.body for m in by_tag[mode]) == sorted(bodies), mode
        assert all(m.keys == [m.body.decode()] for m in by_tag[mode])
    # a sharding key picks one queue: the three in their order there
    sharded = by_tag["sharding"]
    assert len({m.queue_id for m in sharded}) == 1
    assert [m.body for m in sorted(sharded, key=lambda m: m.queue_offset)] == sent["sharding"]


async def test_orderly_send_goes_to_the_selected_queue_in_order(cpp_python: Path, daemons: Daemons) -> None:
    await made_topic(daemons, "CppOrderly", 4)
    messages = [msg("CppOrderly", f"o-{i}".encode(), arg=i % 2 + 1) for i in range(6)]
    results = await asyncio.to_thread(send, cpp_python, daemons, "orderly", messages)
    assert all(r.get("status") == 0 for r in results), results
    got = await read_topic(daemons, "CppOrderly", 4, 6)
    assert sorted(m.body for m in got) == sorted(bytes.fromhex(m["body_hex"]) for m in messages)
    for q in (1, 2):
        mine = sorted((m for m in got if m.queue_id == q), key=lambda m: m.queue_offset)
        assert [m.body for m in mine] == [f"o-{i}".encode() for i in range(6) if i % 2 + 1 == q]
    assert {m.queue_id for m in got} == {1, 2}


async def test_delay_level_is_honoured(cpp_python: Path, daemons: Daemons) -> None:
    await made_topic(daemons, "CppDelay", 1)
    started = time.time() * 1000
    results = await asyncio.to_thread(
        send, cpp_python, daemons, "sync", [msg("CppDelay", b"later", delay=2), msg("CppDelay", b"now")]
    )
    assert all(r.get("status") == 0 for r in results), results
    first = await read_topic(daemons, "CppDelay", 1, 2, timeout=1.0)
    assert [m.body for m in first] == [b"now"]  # level 2 is 5 s: not yet
    got = await read_topic(daemons, "CppDelay", 1, 2, timeout=15)
    later = [m for m in got if m.body == b"later"]
    assert len(later) == 1
    assert "DELAY" not in later[0].properties  # cleared at delivery, as RocketMQ's ScheduleMessageService does
    assert later[0].store_timestamp - started >= 4000


async def test_cpp_batch_send_stores_each_message(cpp_python: Path, daemons: Daemons) -> None:
    """The C++ client sends a batch as SEND_MESSAGE (10) with batch "1" (a RocketMQ broker stores it as one message)."""
    await made_topic(daemons, "CppBatch", 1)
    messages = [msg("CppBatch", f"b-{i}".encode(), tags="bt", keys=f"bk{i}", props={"i": str(i)}) for i in range(3)]
    results = await asyncio.to_thread(send, cpp_python, daemons, "batch", messages)
    assert len(results) == 1 and results[0].get("status") == 0, results
    assert results[0]["offset"] == 0  # the first message's queue offset (its msg_id: the batch has no UNIQ_KEY)
    got = await read_topic(daemons, "CppBatch", 1, 3)
    assert [m.body for m in got] == [b"b-0", b"b-1", b"b-2"]
    assert [(m.tags, m.keys, m.properties["i"]) for m in got] == [("bt", [f"bk{i}"], str(i)) for i in range(3)]
    assert len({m.properties["UNIQ_KEY"] for m in got}) == 3


def _start_tx(cpp_python: Path, d: Daemons, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HOME": str(d.workdir)}
    return subprocess.Popen(
        [str(cpp_python), str(SCRIPTS / "produce_tx.py"), d.ns.address, "PG_CPP_TX", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


async def test_transactions_commit_rollback_and_check_back_after_the_producer_is_killed(
    cpp_python: Path, daemons: Daemons
) -> None:
    await made_topic(daemons, "CppTx", 1)
    sender = _start_tx(
        cpp_python, daemons, "send", "CppTx", "tx-commit:commit", "tx-rollback:rollback", "tx-unknown:unknown", "--hang"
    )
    checker: subprocess.Popen[str] | None = None
    try:
        assert sender.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(sender.stdout.readline), 60)
        results = json.loads(line)["results"]
        assert [r["status"] for r in results] == [0, 0, 0], results
        sender.kill()  # the producer dies with tx-unknown undecided
        sender.wait(10)
        got = await read_topic(daemons, "CppTx", 1, 1, timeout=5)
        assert [m.body for m in got] == [b"tx-commit"]
        assert got[0].keys == ["key-tx-commit"]
        # another producer of the group answers the check-back (once it has heartbeaten: ~30 s)
        checker = _start_tx(cpp_python, daemons, "check", "60")
        got = await read_topic(daemons, "CppTx", 1, 2, timeout=60)
        assert sorted(m.body for m in got) == [b"tx-commit", b"tx-unknown"]
        checker.terminate()
        out, err = checker.communicate(timeout=20)
        checks = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        assert checks and {c["checked"] for c in checks} == {"tx-unknown"}, (out, err[-2000:])
        assert {(c["topic"], c["queue_id"]) for c in checks} == {("CppTx", 0)}
        await asyncio.sleep(1.0)
        again = await read_topic(daemons, "CppTx", 1, 3, timeout=1.0)
        assert sorted(m.body for m in again) == [b"tx-commit", b"tx-unknown"]  # never the rolled back one
    finally:
        for p in (sender, checker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)


def test_without_auto_creation_a_send_to_an_unknown_topic_fails_and_creates_nothing(
    cpp_python: Path, tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    """No TBW102 route (the broker does not auto-create): the client has no route and says so."""
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    broker = broker_process(tmp_path, ns.address, BROKER, env={"PYMQ_HA_PORT": "0"})
    processes.append(broker)
    broker.start()
    results = send_to(cpp_python, ns.address, tmp_path, "sync", [msg("CppNotThere", b"x")])
    assert len(results) == 1 and "error" in results[0], results
    assert "route" in results[0]["error"].lower(), results
    topics = json.loads((tmp_path / BROKER / "config" / "topics.json").read_text())["topicConfigTable"]
    assert "CppNotThere" not in topics and "TBW102" not in topics and topics  # (the system topics are there)
