"""Transactional messages on real daemons: commit and rollback, and kill -9 of the producer or the broker.

The broker checks back after 1 s here (``PYMQ_TRANSACTION_TIMEOUT_SECONDS``), scanning every 0.3 s.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt, PushConsumer
from pymq.client.admin import AdminClient
from pymq.client.transaction_producer import TransactionProducer, TransactionState
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.daemon_helpers import create_topic, wait_for_route
from tests.helpers import run_admin, wait_until

pytestmark = pytest.mark.integration

APP = Path(__file__).parent / "apps" / "tx_producer.py"
FAST_CHECKS = {"PYMQ_TRANSACTION_TIMEOUT_SECONDS": "1", "PYMQ_TRANSACTION_CHECK_INTERVAL_SECONDS": "0.3"}
FAST_CLIENT = {
    "heartbeat_interval_seconds": 0.5,
    "rebalance_interval_seconds": 1.0,
    "poll_namesrv_interval_seconds": 1.0,
}
COMMIT, ROLLBACK, UNKNOWN = TransactionState.COMMIT, TransactionState.ROLLBACK, TransactionState.UNKNOWN


class Daemons:
    def __init__(self, tmp_path: Path, processes: list[DaemonProcess], port: int) -> None:
        self.tmp_path = tmp_path
        self.processes = processes
        self.port = port
        self.ns = namesrv_process(tmp_path).start()
        processes.append(self.ns)
        self.broker = self.start_broker()

    def start_broker(self) -> DaemonProcess:
        """The broker (again, after a kill): same store, same port, so clients' addresses stay valid."""
        # (the HA listener on any free port: only the main port was reserved, port + 1 may be taken)
        env = {**FAST_CHECKS, "PYMQ_HA_PORT": "0"}
        b = broker_process(self.tmp_path, self.ns.address, "broker-a", "--port", str(self.port), env=env)
        self.processes.append(b)
        return b.start()


@pytest.fixture
async def daemons(tmp_path: Path, processes: list[DaemonProcess], free_ports) -> AsyncIterator[Daemons]:
    d = await asyncio.to_thread(Daemons, tmp_path, processes, free_ports(1)[0])
    await create_topic([d.broker], "orders")
    await wait_for_route(d.ns.address, "orders", 1)
    yield d


class Received:
    """A push consumer of ``orders`` that records every body it is handed."""

    def __init__(self, namesrv: str) -> None:
        self.bodies: list[str] = []
        self.consumer = PushConsumer(
            namesrv, "tx-readers", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST_CLIENT
        )
        self.consumer.subscribe("orders")
        self.consumer.listener(self.on)

    async def on(self, msgs: list[MessageExt]) -> ConsumeResult:
        self.bodies += [m.body.decode() for m in msgs]
        return ConsumeResult.SUCCESS


async def pending(namesrv: str) -> list[dict]:
    async with AdminClient(namesrv) as admin:
        return await admin.pending_half_messages()


async def wait_no_pending(namesrv: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while rows := await pending(namesrv):
        assert time.monotonic() < deadline, f"still pending after {timeout}s: {rows}"
        await asyncio.sleep(0.2)


async def admin_cli(namesrv: str, *args: str) -> str:
    code, out, err = await run_admin(namesrv, *args)
    assert code == 0, err
    return out


async def test_commit_lands_then_delivers_and_rollback_never_does(daemons: Daemons) -> None:
    received = Received(daemons.ns.address)
    decide = asyncio.Event()

    async def local_tx(msg: Message, outcome: TransactionState) -> TransactionState:
        await decide.wait()
        return outcome

    async with received.consumer, TransactionProducer(daemons.ns.address, "tx-p", lambda m: UNKNOWN) as producer:
        sends = [
            asyncio.ensure_future(
                producer.send_in_transaction(Message("orders", body), local_tx, outcome, transaction_timeout=60)
            )
            for body, outcome in ((b"commit-me", COMMIT), (b"roll-me", ROLLBACK))
        ]
        deadline = time.monotonic() + 15
        while len(await pending(daemons.ns.address)) < 2:
            assert time.monotonic() < deadline, "half messages not stored"
            await asyncio.sleep(0.05)
        rows = json.loads(await admin_cli(daemons.ns.address, "--json", "tx-pending", "--group", "tx-p"))
        assert sorted((r["topic"], r["producerGroup"], r["checkTimes"]) for r in rows) == [("orders", "tx-p", 0)] * 2
        assert "roll-me" not in await admin_cli(daemons.ns.address, "tx-pending", "--group", "nobody")
        await asyncio.sleep(0.5)  # the consumer is running: nothing may arrive before the commit
        assert received.bodies == []
        decide.set()
        await asyncio.gather(*sends)
        await wait_until(lambda: received.bodies == ["commit-me"], timeout=20, what="the committed message")
        await wait_no_pending(daemons.ns.address)
        await asyncio.sleep(1.0)  # resolved (no pending left): the rolled-back one never shows up
    assert received.bodies == ["commit-me"]


async def test_producer_killed_after_half_send_another_producer_answers_the_check(
    daemons: Daemons, tmp_path: Path
) -> None:
    db_path = tmp_path / "shop.db"
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE orders(body TEXT PRIMARY KEY)")
    markers = tmp_path / "markers"
    markers.mkdir()
    bodies = ["keep-1", "keep-2", "drop-1"]
    proc = subprocess.Popen(
        [sys.executable, str(APP), daemons.ns.address, "tx-p", str(db_path), str(markers), *bodies],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_until(
            lambda: all((markers / f"{b}.local").exists() for b in bodies), timeout=30, what="local transactions"
        )
        proc.kill()  # SIGKILL: no END_TRANSACTION was sent for any of them
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def checker(msg: MessageExt) -> TransactionState:
        with sqlite3.connect(db_path) as db:
            found = db.execute("SELECT 1 FROM orders WHERE body = ?", (msg.body.decode(),)).fetchone()
        return COMMIT if found else ROLLBACK

    received = Received(daemons.ns.address)
    takeover = TransactionProducer(daemons.ns.address, "tx-p", checker, topics=["orders"], **FAST_CLIENT)
    async with received.consumer, takeover:
        await wait_until(
            lambda: sorted(set(received.bodies)) == ["keep-1", "keep-2"], timeout=30, what="checked-back commits"
        )
        await wait_no_pending(daemons.ns.address)
    assert "drop-1" not in received.bodies


async def test_broker_killed_between_half_and_commit(daemons: Daemons) -> None:
    """Halves stored, broker SIGKILLed: after the restart the late commit lands and check-back resolves the rest."""
    truth = {"late-commit": COMMIT, "checked-commit": COMMIT, "checked-rollback": ROLLBACK, "committed-before": COMMIT}
    asked: list[str] = []

    def checker(msg: MessageExt) -> TransactionState:
        asked.append(msg.body.decode())
        return truth[msg.body.decode()]

    received = Received(daemons.ns.address)
    async with received.consumer, TransactionProducer(daemons.ns.address, "tx-p", checker, **FAST_CLIENT) as producer:
        before = await producer.send_half(Message("orders", b"committed-before"), transaction_timeout=60)
        await producer.end_transaction(before, COMMIT)
        await wait_until(lambda: "committed-before" in received.bodies, timeout=20, what="first commit")
        late = await producer.send_half(Message("orders", b"late-commit"), transaction_timeout=60)
        for body in ("checked-commit", "checked-rollback"):
            await producer.send_half(Message("orders", body.encode()))
        daemons.broker.kill()  # SIGKILL between the half sends and their outcomes
        await asyncio.to_thread(daemons.start_broker)
        rpc = producer.instance.rpc  # type: ignore[union-attr]
        await wait_until(lambda: rpc.is_connected(late.store_addr), timeout=20, what="the producer reconnected")
        # Its check-back would come only after 60 s: within this test only this END can commit it.
        await producer.end_transaction(late, COMMIT)
        await wait_until(
            lambda: {"late-commit", "checked-commit"} <= set(received.bodies), timeout=40, what="commits after restart"
        )
        await wait_no_pending(daemons.ns.address)
    assert "checked-rollback" not in received.bodies
    assert set(received.bodies) == {"committed-before", "late-commit", "checked-commit"}
    assert "checked-rollback" in asked and "committed-before" not in asked and "late-commit" not in asked


async def test_broker_killed_after_check_backs_commits_the_message_once(daemons: Daemons) -> None:
    """Checked (put back) several times, then kill -9: after the restart the original and its copies
    are one message, committed once when the checker finally knows."""
    answer = [UNKNOWN]
    async with TransactionProducer(daemons.ns.address, "tx-p", lambda m: answer[0], **FAST_CLIENT) as producer:
        await producer.send_in_transaction(Message("orders", b"slow-decision"), lambda m, a: UNKNOWN)
        deadline = time.monotonic() + 30
        while not any(r["checkTimes"] >= 2 for r in await pending(daemons.ns.address)):
            assert time.monotonic() < deadline, "no check-backs"
            await asyncio.sleep(0.1)
        daemons.broker.kill()
        await asyncio.to_thread(daemons.start_broker)
        answer[0] = COMMIT
        await wait_no_pending(daemons.ns.address, timeout=40)
        await asyncio.sleep(1.0)  # any further check or copy would commit again now
        async with AdminClient(daemons.ns.address) as admin:
            stored = sum(row["maxOffset"] - row["minOffset"] for row in await admin.topic_status("orders"))
    assert stored == 1
