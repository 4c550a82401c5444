"""Transactional messages in process: half messages, commit, rollback, check-back, discard, admin, metrics.

The kill -9 scenarios run on real daemons in ``test_transaction_daemons.py``.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path

import pytest

from pymq.broker.app import BrokerApp
from pymq.broker.transaction.hook import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC
from pymq.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer, PushConsumer, broker_api, sync
from pymq.client.admin import AdminClient
from pymq.client.producer import SendResult
from pymq.client.transaction_producer import TransactionProducer, TransactionState
from pymq.errors import LocalTransactionError, NoPermissionError, TransactionError
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import FLAG_ONEWAY, Command
from pymq.protocol.frame import FrameDecoder, encode_bytes
from pymq.protocol.message import decode_message
from pymq.protocol.record import encode_properties, encode_record, iter_spans
from pymq.protocol.requests import EndTransactionRequest
from pymq.protocol.transaction import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from pymq.testing import FakeClock, LocalCluster, capture_logs
from pymq.transport.codec import default_codec
from pymq.transport.connection import Connection
from tests.helpers import RecordingTransport, wait_until, wait_until_sync

pytestmark = pytest.mark.integration

COMMIT, ROLLBACK, UNKNOWN = TransactionState.COMMIT, TransactionState.ROLLBACK, TransactionState.UNKNOWN
#: check-backs come quickly in these tests: 1 s timeout, a scan every 0.2 s
FAST_CHECKS = {"transaction_timeout_seconds": 1.0, "transaction_check_interval_seconds": 0.2}


@pytest.fixture
async def cluster(tmp_path: Path):
    async with LocalCluster(tmp_path / "c", brokers=1, broker=FAST_CHECKS) as c:
        await c.create_topic("orders", 4)
        yield c


@pytest.fixture
async def clocked(tmp_path: Path, clock: FakeClock):
    """``cluster`` with its broker on ``clock``: a timeout passes when the test says so, not after sleeping it."""
    async with LocalCluster(tmp_path / "c", brokers=1, broker=FAST_CHECKS, clock=clock) as c:
        await c.create_topic("orders", 4)
        yield c


def age(clock: FakeClock, seconds: float) -> None:
    """Move the brokers' clock to ``seconds`` past the real time now: what was stored so far is that old."""
    clock.advance(max(0.0, time.time() - clock.time_ms() / 1000) + seconds)


def check_round(broker: BrokerApp) -> int:
    """One check-back round now (as the service runs every 0.2 s); how many producers it asked."""
    check = broker.transaction.check
    assert check is not None
    return check.check()


def stored(cluster: LocalCluster, topic: str) -> list[MessageExt]:
    """Every message stored on ``topic`` (all queues), read straight from the broker's store."""
    store = cluster.brokers[0].store
    assert store is not None
    out = []
    for qid in store.queue_ids(topic):
        res = store.get_messages("test", topic, qid, 0, 1024)
        for buf in res.buffers:
            out += [decode_message(buf, pos) for pos, _ in iter_spans(buf)]
    return out


def never(msg: MessageExt) -> TransactionState:
    raise AssertionError(f"no check-back expected, got one for {msg.msg_id}")


async def test_commit_is_delivered_only_once_the_commit_lands_with_its_properties(cluster: LocalCluster) -> None:
    received: list[MessageExt] = []
    consumer = PushConsumer(cluster.namesrv_addr, "tx-c", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders")

    @consumer.listener
    async def on(msgs: list[MessageExt]) -> ConsumeResult:
        received.extend(msgs)
        return ConsumeResult.SUCCESS

    local_started = asyncio.Event()
    release = asyncio.Event()

    async def local_tx(msg: Message, arg: object) -> TransactionState:
        assert arg == "order-1"
        local_started.set()
        await release.wait()
        return COMMIT

    msg = Message("orders", b"paid", tags="paid", keys=["order-1"], properties={"region": "eu"})
    async with consumer, TransactionProducer(cluster.namesrv_addr, "tx-p", never) as producer:
        sending = asyncio.ensure_future(producer.send_in_transaction(msg, local_tx, "order-1"))
        await asyncio.wait_for(local_started.wait(), 10)
        # The half message is stored, but nowhere a consumer reads.
        assert [m.properties["REAL_TOPIC"] for m in stored(cluster, HALF_TOPIC)] == ["orders"]
        assert stored(cluster, "orders") == []
        await asyncio.sleep(0.5)
        assert received == []
        release.set()
        result = await sending
        assert result.local_state is COMMIT
        await wait_until(lambda: len(received) == 1, timeout=15, what="the committed message")
    m = received[0]
    assert (m.topic, m.body, m.tags, m.keys) == ("orders", b"paid", "paid", ["order-1"])
    assert m.properties["region"] == "eu"
    assert m.msg_id == result.msg_id
    assert m.queue_id in range(4)
    for internal in ("TRAN_MSG", "REAL_TOPIC", "REAL_QID"):
        assert internal not in m.properties
    assert m.properties["PGROUP"] == "tx-p"
    assert len(stored(cluster, OP_TOPIC)) == 1
    assert cluster.brokers[0].transaction.service().pending() == []


async def test_rollback_is_never_delivered(clocked: LocalCluster, clock: FakeClock) -> None:
    cluster = clocked
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", never) as producer:
        result = await producer.send_in_transaction(Message("orders", b"cancelled"), lambda m, a: ROLLBACK)
        assert result.local_state is ROLLBACK
        tx = cluster.brokers[0].transaction.service()
        await wait_until(lambda: tx.rollbacks == 1, what="the rollback")
        age(clock, 1.5)  # past the transaction timeout: no check-back either
        assert check_round(cluster.brokers[0]) == 0
    assert stored(cluster, "orders") == []
    assert tx.pending() == [] and tx.checks == 0


async def test_unknown_is_resolved_by_check_back_commit_and_rollback(clocked: LocalCluster, clock: FakeClock) -> None:
    cluster = clocked
    decisions = {"keep": COMMIT, "drop": ROLLBACK}
    asked: list[str] = []

    async def checker(msg: MessageExt) -> TransactionState:
        asked.append(msg.body.decode())
        assert msg.topic == "orders"  # the checker sees the real topic
        return decisions[msg.body.decode()]

    async with TransactionProducer(cluster.namesrv_addr, "tx-p", checker) as producer:
        for body in ("keep", "drop"):
            result = await producer.send_in_transaction(Message("orders", body.encode()), lambda m, a: UNKNOWN)
            assert result.local_state is UNKNOWN
        tx = cluster.brokers[0].transaction.service()
        age(clock, 1.0)  # the transaction timeout
        await wait_until(lambda: tx.commits == 1 and tx.rollbacks == 1, timeout=15, what="check-back outcomes")
    assert sorted(asked) == ["drop", "keep"]
    assert [m.body for m in stored(cluster, "orders")] == [b"keep"]
    assert tx.pending() == []


async def test_local_transaction_exception_leaves_it_to_the_check_back(clocked: LocalCluster, clock: FakeClock) -> None:
    cluster = clocked

    def boom(msg: Message, arg: object) -> TransactionState:
        raise RuntimeError("db down")

    async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: COMMIT) as producer:
        with pytest.raises(LocalTransactionError) as info:
            await producer.send_in_transaction(Message("orders", b"x"), boom)
        assert isinstance(info.value.__cause__, RuntimeError)
        with pytest.raises(TransactionError):
            await producer.send_in_transaction(Message("orders", b"x", delay_level=2), lambda m, a: COMMIT)
        age(clock, 1.0)  # the transaction timeout
        await wait_until(lambda: len(stored(cluster, "orders")) == 1, timeout=15, what="checked-back commit")


async def test_checks_used_up_go_to_the_check_max_topic(tmp_path: Path, clock: FakeClock) -> None:
    broker = {**FAST_CHECKS, "transaction_check_max": 2}
    async with LocalCluster(tmp_path / "c", broker=broker, clock=clock) as cluster:
        await cluster.create_topic("orders", 2)
        asked = []
        with capture_logs() as events:
            async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: asked.append(m) or UNKNOWN) as p:
                await p.send_in_transaction(Message("orders", b"limbo", keys=["k1"]), lambda m, a: UNKNOWN)
                tx = cluster.brokers[0].transaction.service()
                deadline = time.monotonic() + 20
                while tx.discarded != 1:  # each copy put back waits its timeout again: age it, let a round see it
                    assert time.monotonic() < deadline, "the discard"
                    age(clock, 1.0)
                    await asyncio.sleep(0.25)
        [logged] = [e for e in events if e["event"] == "transaction_discarded"]
        assert logged["log_level"] == "warning" and logged["to"] == CHECK_MAX_TOPIC and logged["group"] == "tx-p"
        assert len(asked) == 2 and tx.checks == 2
        [gone] = stored(cluster, CHECK_MAX_TOPIC)
        assert gone.body == b"limbo" and gone.keys == ["k1"] and gone.properties["REAL_TOPIC"] == "orders"
        assert cluster.brokers[0].topics.get(CHECK_MAX_TOPIC) is not None  # readable with the usual tools
        assert stored(cluster, "orders") == [] and tx.pending() == []


async def test_per_message_timeout_defers_the_first_check(clocked: LocalCluster, clock: FakeClock) -> None:
    cluster = clocked
    asked: list[bytes] = []
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: asked.append(m.body) or COMMIT) as p:
        await p.send_in_transaction(Message("orders", b"late"), lambda m, a: UNKNOWN, transaction_timeout=60)
        await p.send_in_transaction(Message("orders", b"soon"), lambda m, a: UNKNOWN)
        age(clock, 1.0)  # the default timeout
        await wait_until(lambda: asked == [b"soon"], timeout=15, what="the default-timeout check")
        age(clock, 2.5)
        assert check_round(cluster.brokers[0]) == 0
        assert asked == [b"soon"]
        [pending] = cluster.brokers[0].transaction.service().pending("tx-p")
        assert pending["checkTimes"] == 0 and pending["topic"] == "orders"


async def test_check_back_goes_to_another_live_producer_of_the_group(clocked: LocalCluster, clock: FakeClock) -> None:
    """The first producer closes without an outcome; a second one of the group (another client) is asked."""
    cluster = clocked
    first = TransactionProducer(cluster.namesrv_addr, "tx-p", never, instance_name="first")
    async with first:
        await first.send_in_transaction(Message("orders", b"orphan"), lambda m, a: UNKNOWN, transaction_timeout=2)
    second = TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: COMMIT, topics=["orders"], instance_name="2nd")
    async with second:
        age(clock, 2.0)  # the message's timeout
        await wait_until(lambda: len(stored(cluster, "orders")) == 1, timeout=15, what="commit via the 2nd producer")


async def test_end_transaction_must_name_the_half_message_and_commits_once(cluster: LocalCluster) -> None:
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", never) as producer:
        half = await producer.send_half(Message("orders", b"once"))
        tx = cluster.brokers[0].transaction.service()

        def end(group: str = "tx-p", offset: int = half.queue_offset) -> str:
            return tx.end_transaction(
                EndTransactionRequest(
                    producer_group=group,
                    tran_state_table_offset=offset,
                    commit_log_offset=half.commit_log_offsets[0],
                    commit_or_rollback=TRANSACTION_COMMIT_TYPE,
                )
            )

        assert end(group="other") == "mismatch"
        assert end(offset=half.queue_offset + 1) == "mismatch"
        assert end() == "commit"
        assert end() == "duplicate"
        await producer.end_transaction(half, COMMIT)  # late duplicate over the wire: ignored too
        await asyncio.sleep(0.3)
    assert len(stored(cluster, "orders")) == 1


async def test_pending_listing_and_metrics(cluster: LocalCluster) -> None:
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: UNKNOWN) as producer:
        await producer.send_in_transaction(
            Message("orders", b"a", keys=["ka"]), lambda m, a: UNKNOWN, transaction_timeout=60
        )
        await producer.send_in_transaction(Message("orders", b"b"), lambda m, a: COMMIT)
        await producer.send_in_transaction(Message("orders", b"c"), lambda m, a: ROLLBACK)
        tx = cluster.brokers[0].transaction.service()
        await wait_until(lambda: tx.commits == 1 and tx.rollbacks == 1, what="outcomes")
        async with AdminClient(cluster.namesrv_addr) as admin:
            rows = await admin.pending_half_messages(group="tx-p")
            assert [(r["keys"], r["topic"], r["checkTimes"]) for r in rows] == [("ka", "orders", 0)]
            assert await admin.pending_half_messages(group="nobody") == []
    from pymq.metrics.broker import BrokerCollector

    series = {s.name: s.value for fam in BrokerCollector(cluster.brokers[0]).collect() for s in fam.samples}
    assert series["pymq_transaction_half_messages_total"] == 3
    assert series["pymq_transaction_commits_total"] == 1
    assert series["pymq_transaction_rollbacks_total"] == 1
    assert series["pymq_transaction_checks_total"] == 0
    assert series["pymq_transaction_pending_messages"] == 1  # "a" waits (60 s before its first check)


async def test_pending_half_messages_survive_a_restart_and_commit_after_it(tmp_path: Path) -> None:
    async with LocalCluster(tmp_path / "c", broker={"transaction_timeout_seconds": 60}) as cluster:
        await cluster.create_topic("orders", 2)
        async with TransactionProducer(cluster.namesrv_addr, "tx-p", never) as producer:
            done = await producer.send_half(Message("orders", b"done"))
            await producer.end_transaction(done, COMMIT)
            half = await producer.send_half(Message("orders", b"later"))
            await wait_until(lambda: cluster.brokers[0].transaction.service().commits == 1, what="first commit")
            broker = cluster.brokers[0]
            await cluster.stop_broker(broker)
            restarted = await cluster.add_broker(0, port=int(broker.address.rpartition(":")[2]))
            assert [p["msgId"] for p in restarted.transaction.service().pending()] == [half.msg_id]
            assert restarted.transaction.service().is_resolved(done.queue_offset)
            await producer.end_transaction(half, COMMIT)
            await wait_until(
                lambda: restarted.transaction.service().commits == 1, timeout=10, what="commit after restart"
            )
        assert sorted(m.body for m in stored(cluster, "orders")) == [b"done", b"later"]
        assert restarted.transaction.service().pending() == []


async def test_plain_sends_are_not_touched(cluster: LocalCluster) -> None:
    async with Producer(cluster.namesrv_addr) as p:
        await p.send(Message("orders", b"plain", properties={"note": "TRAN_MSG is only a word here"}))
        await p.send(Message("orders", b"not-true", properties={"TRAN_MSG": "false"}))
    assert sorted(m.body for m in stored(cluster, "orders")) == [b"not-true", b"plain"]
    assert stored(cluster, HALF_TOPIC) == []


async def test_a_thousand_concurrent_transactions_deliver_exactly_the_committed_ones(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with LocalCluster(tmp_path / "c", broker=FAST_CHECKS, clock=clock) as cluster:
        await cluster.create_topic("orders", 4)
        rng = random.Random(18)
        outcomes = {f"tx-{i}": rng.choice([COMMIT, ROLLBACK, UNKNOWN]) for i in range(1000)}
        # UNKNOWN ones are resolved by the checker, half of them each way.
        truth = {k: (v if v is not UNKNOWN else (COMMIT if int(k[3:]) % 2 else ROLLBACK)) for k, v in outcomes.items()}

        async def local_tx(msg: Message, key: str) -> TransactionState:
            await asyncio.sleep(rng.random() * 0.05)
            return outcomes[key]

        async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: truth[m.keys[0]]) as producer:
            sem = asyncio.Semaphore(200)

            async def one(key: str) -> None:
                async with sem:
                    await producer.send_in_transaction(Message("orders", key.encode(), keys=[key]), local_tx, key)

            await asyncio.gather(*(one(k) for k in outcomes))
            tx = cluster.brokers[0].transaction.service()
            age(clock, 1.0)  # the transaction timeout of the UNKNOWN ones
            await wait_until(lambda: tx.commits + tx.rollbacks == 1000, timeout=30, what="all 1000 outcomes")
        expected = sorted(k for k, v in truth.items() if v is COMMIT)
        assert sorted(m.body.decode() for m in stored(cluster, "orders")) == expected
        assert tx.pending() == []
        # The next check round moves both positions to the queues' ends and forgets every op.
        store = cluster.brokers[0].store
        assert store is not None

        def caught_up() -> bool:
            ends = (store.max_offset(HALF_TOPIC, 0), store.max_offset(OP_TOPIC, 0))
            return (tx.half_offset, tx.op_offset) == ends and not tx.resolved

        await wait_until(caught_up, timeout=10, what="half and op positions at the end")


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "transactions_sqlite.py"


async def test_the_sqlite_example_delivers_exactly_the_orders_in_its_table(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """examples/transactions_sqlite.py (the sync facade): commit, duplicate -> rollback, crash -> check-back."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), "--namesrv", cluster.namesrv_addr, "--db", str(tmp_path / "shop.db"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines[:4]] == ["COMMIT", "UNKNOWN", "ROLLBACK", "COMMIT"]
    assert lines[4] == "in the table: 3 orders; delivered: 3; same: True"
    assert cluster.brokers[0].transaction.service().checks >= 1


async def test_sync_facade_runs_local_tx_on_the_caller_and_raises_typed_errors(cluster: LocalCluster) -> None:
    import threading

    def blocking_client() -> list[str]:
        seen = []

        def local_tx(msg: Message, arg: str) -> TransactionState:
            seen.append(threading.current_thread().name)
            if arg == "fail":
                raise ValueError("constraint")
            return COMMIT

        with sync.TransactionProducer(cluster.namesrv_addr, "tx-sync", lambda m: ROLLBACK) as producer:
            result = producer.send_in_transaction(Message("orders", b"sync"), local_tx, "ok")
            assert isinstance(result, sync.TransactionSendResult) and result.local_state is COMMIT
            with pytest.raises(LocalTransactionError) as info:
                producer.send_in_transaction(Message("orders", b"sync-fail"), local_tx, "fail")
            assert info.value.result.msg_id  # the half message that the check-back will resolve
            # the checker (run on a worker thread) rolls the failed one back while the producer is up
            wait_until_sync(lambda: tx.rollbacks == 1, timeout=15, what="the checked-back rollback")
        return seen

    tx = cluster.brokers[0].transaction.service()
    caller = await asyncio.to_thread(lambda: (threading.current_thread().name, blocking_client()))
    assert caller[1] == [caller[0], caller[0]]
    assert tx.commits == 1
    assert [m.body for m in stored(cluster, "orders")] == [b"sync"]


async def test_a_transactional_message_is_never_delayed_by_a_timer(cluster: LocalCluster) -> None:
    """The half-message hook runs before the timer hook and drops timer and merge properties (as DELAY)."""
    msg = Message("orders", b"now")
    msg.set_delay_ms(60_000)
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", never) as producer:
        await producer.send_in_transaction(msg, lambda m, a: COMMIT)
        tx = cluster.brokers[0].transaction.service()
        await wait_until(lambda: tx.commits == 1, what="the commit")
    [m] = stored(cluster, "orders")
    assert m.body == b"now" and "TIMER_DELAY_MS" not in m.properties
    assert stored(cluster, "rmq_sys_wheel_timer") == []


async def test_positions_past_the_queue_ends_are_clamped_at_start(tmp_path: Path, clock: FakeClock) -> None:
    """A state file ahead of the store (its tail lost in an OS crash) must not hide new half messages."""
    import json

    async with LocalCluster(tmp_path / "c", broker=FAST_CHECKS, clock=clock) as cluster:
        await cluster.create_topic("orders", 2)
        broker = cluster.brokers[0]
        state = Path(broker.config.store.store_dir) / "config" / "transactionOffset.json"
        await cluster.stop_broker(broker)
        state.write_text(json.dumps({"halfOffset": 10**6, "opOffset": 10**6}))
        restarted = await cluster.add_broker(0)
        await cluster.wait_for_route("orders", 1)
        assert restarted.transaction.service().state() == {"halfOffset": 0, "opOffset": 0, "horizon": 0}
        async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: COMMIT) as producer:
            await producer.send_in_transaction(Message("orders", b"seen"), lambda m, a: UNKNOWN)
            age(clock, 1.0)  # the transaction timeout
            await wait_until(lambda: len(stored(cluster, "orders")) == 1, timeout=15, what="the checked-back commit")


async def test_a_takeover_producer_for_an_unknown_topic_fails_to_start_cleanly(cluster: LocalCluster) -> None:
    from pymq.errors import NoRouteError

    producer = TransactionProducer(cluster.namesrv_addr, "tx-p", never, topics=["no-such-topic"])
    with pytest.raises(NoRouteError):
        await producer.start()
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", never, topics=["orders"]):
        pass  # the group is free again: the failed start released it


async def test_a_resolved_message_with_a_copy_past_the_positions_stays_resolved_after_a_restart(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A (checked once: a copy after B) is committed; B waits. A's op record is then passed (its origin is
    below B's), but A's copy lies past halfOffset: after a restart it must not be checked and committed again."""
    async with LocalCluster(tmp_path / "c", broker=FAST_CHECKS, clock=clock) as cluster:
        await cluster.create_topic("orders", 1)
        answer = [UNKNOWN]
        async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: answer[0]) as producer:
            a = await producer.send_half(Message("orders", b"A"))
            await producer.send_half(Message("orders", b"B"), transaction_timeout=60)
            tx = cluster.brokers[0].transaction.service()
            age(clock, 1.0)  # A's timeout
            await wait_until(lambda: tx.checks >= 1, timeout=15, what="A checked back (put back after B)")
            await producer.end_transaction(a, COMMIT)
            store = cluster.brokers[0].store
            assert store is not None
            await wait_until(
                lambda: (
                    tx.commits == 1 and tx.op_offset == store.max_offset(OP_TOPIC, 0) and tx.horizon > a.queue_offset
                ),
                timeout=10,
                what="A's op record passed",
            )
            assert tx.half_offset < store.max_offset(HALF_TOPIC, 0) - 1  # A's copy lies past it
            broker = cluster.brokers[0]
            await cluster.stop_broker(broker)
            answer[0] = COMMIT  # a check of A now would commit it a second time
            restarted = await cluster.add_broker(0, port=int(broker.address.rpartition(":")[2]))
            assert [p["msgId"] for p in restarted.transaction.service().pending()] == [
                m.properties["UNIQ_KEY"] for m in stored(cluster, HALF_TOPIC) if m.body == b"B"
            ]
            age(clock, 2.0)  # past the timeout
            assert check_round(restarted) == 0  # B waits its 60 s; A is resolved
            await asyncio.sleep(0.5)  # a few check rounds of the service too
        assert [m.body for m in stored(cluster, "orders")] == [b"A"]


async def test_check_settings_change_at_runtime(tmp_path: Path, clock: FakeClock) -> None:
    """UPDATE_BROKER_CONFIG reaches the check service: a 60 s timeout lowered to 1 s checks at once."""
    slow = {"transaction_timeout_seconds": 60.0, "transaction_check_interval_seconds": 0.2}
    async with LocalCluster(tmp_path / "c", broker=slow, clock=clock) as cluster:
        await cluster.create_topic("orders", 1)
        async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: COMMIT) as producer:
            await producer.send_in_transaction(Message("orders", b"x"), lambda m, a: UNKNOWN)
            age(clock, 1.5)
            assert check_round(cluster.brokers[0]) == 0
            tx = cluster.brokers[0].transaction.service()
            assert tx.checks == 0
            async with AdminClient(cluster.namesrv_addr) as admin:
                await admin.update_broker_config({"transaction_timeout_seconds": 1})
            await wait_until(lambda: tx.commits == 1, timeout=10, what="the check-back under the new timeout")


async def test_end_transaction_never_commits_a_half_record_forged_inside_a_message_body(cluster: LocalCluster) -> None:
    """A record embedded in a plain message's body, dressed as a half message, is not one: the
    half queue's own entry must point at the offset (else any producer could commit anything)."""
    from pymq.protocol.message import Prop
    from pymq.protocol.record import encode_properties, encode_record

    broker = cluster.brokers[0]
    store = broker.store
    assert store is not None
    props = {Prop.REAL_TOPIC: "orders", Prop.REAL_QID: "0", "PGROUP": "evil", "TRAN_MSG": "true"}

    def fake(phys: int) -> bytes:
        return encode_record(
            HALF_TOPIC.encode(), b"forged", encode_properties(props), queue_offset=0, physical_offset=phys
        )

    placeholder = fake(0)
    body_at = encode_record(b"orders", placeholder, b"").index(placeholder)
    phys = store.commitlog.max_offset + body_at
    res = store.put("orders", 1, encode_record(b"orders", fake(phys), b""))
    assert res[0].physical_offset + body_at == phys
    assert store.read_record(phys) is not None  # the forged record does look like one
    outcome = broker.transaction.service().end_transaction(
        EndTransactionRequest(
            producer_group="evil",
            tran_state_table_offset=0,
            commit_log_offset=phys,
            commit_or_rollback=TRANSACTION_COMMIT_TYPE,
        )
    )
    assert outcome == "mismatch"
    assert [m.body for m in stored(cluster, "orders")] == [fake(phys)]


@pytest.mark.parametrize("topic", [HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC, "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"])
async def test_clients_cannot_send_to_the_transaction_timer_and_schedule_topics(tmp_path: Path, topic: str) -> None:
    """A message sent straight to the half (or timer, or delay-level schedule) topic names its own
    REAL_TOPIC: it would be committed (delivered) to a topic the sender may not write, so such
    sends are refused."""
    async with LocalCluster(tmp_path / "c", brokers=1, broker={"auto_create_topic": True}) as c:
        if topic != "SCHEDULE_TOPIC_XXXX":  # the broker's own, always there
            await c.create_topic(topic, 1)
        async with Producer(c.namesrv_addr, "p") as producer:
            msg = Message(topic, b"x", properties={"REAL_TOPIC": "secret", "REAL_QID": "0", "PGROUP": "evil"})
            with pytest.raises(NoPermissionError, match="forbidden"):
                await producer.send(msg)
        store = c.brokers[0].store
        assert store is not None
        assert store.max_offset(topic, 0) == 0


async def test_end_transaction_naming_another_topic_than_the_halfs_is_ignored(cluster: LocalCluster) -> None:
    """END_TRANSACTION's topic (what the ACL checks PUB on) must be the half message's real topic:
    a PUB on some other topic does not end a half message of ``orders``."""
    tx = cluster.brokers[0].transaction.service()
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", never) as producer:
        half = await producer.send_half(Message("orders", b"mine"))

    def end(topic: str | None) -> str:
        return tx.end_transaction(
            EndTransactionRequest(
                producer_group="tx-p",
                tran_state_table_offset=half.queue_offset,
                commit_log_offset=half.commit_log_offsets[0],
                commit_or_rollback=TRANSACTION_COMMIT_TYPE,
                topic=topic,
            )
        )

    assert end("elsewhere") == "mismatch"
    assert stored(cluster, "orders") == []
    assert end("orders") == "commit"
    assert [m.body for m in stored(cluster, "orders")] == [b"mine"]


async def test_a_half_message_cannot_claim_another_ones_origin(cluster: LocalCluster) -> None:
    """TRAN_PREPARED_QUEUE_OFFSET is the broker's own (put-back copies): a producer that sets it
    on its half message must not supersede, and by rolling back resolve, someone else's."""
    tx = cluster.brokers[0].transaction.service()
    async with (
        TransactionProducer(cluster.namesrv_addr, "tx-p", never) as victim,
        TransactionProducer(cluster.namesrv_addr, "evil-p", never, instance_name="evil") as evil,
    ):
        half = await victim.send_half(Message("orders", b"victim"))
        forged = Message("orders", b"evil", properties={"TRAN_PREPARED_QUEUE_OFFSET": str(half.queue_offset)})
        evil_half = await evil.send_half(forged)

        def end(group: str, h: object, kind: int) -> str:
            return tx.end_transaction(
                EndTransactionRequest(
                    producer_group=group,
                    tran_state_table_offset=h.queue_offset,  # type: ignore[attr-defined]
                    commit_log_offset=h.commit_log_offsets[0],  # type: ignore[attr-defined]
                    commit_or_rollback=kind,
                )
            )

        assert end("evil-p", evil_half, TRANSACTION_ROLLBACK_TYPE) == "rollback"
        assert end("tx-p", half, TRANSACTION_COMMIT_TYPE) == "commit"
    assert [m.body for m in stored(cluster, "orders")] == [b"victim"]


async def test_a_oneway_end_transaction_is_applied_after_the_answers_of_its_read(cluster: LocalCluster) -> None:
    """A producer's END_TRANSACTION and its next half message arrive in one read (the producer
    sends them in one write): the half message is answered first, the commit follows in the same
    loop pass; an END_TRANSACTION that asks for an answer is applied before it is answered."""
    broker = cluster.brokers[0]
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", never) as producer:
        first = await producer.send_half(Message("orders", b"first"))
        second = await producer.send_half(Message("orders", b"second"))
    conn = Connection(broker.dispatcher, default_codec(16 << 20), server_side=True)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]

    def end(half: SendResult, oneway: bool) -> Command:
        cmd = broker_api.end_transaction(
            "tx-p",
            half.queue_offset,
            half.commit_log_offsets[0],
            TRANSACTION_COMMIT_TYPE,
            msg_id=half.msg_id,
            topic="orders",
        )
        cmd.opaque = next(opaques)
        if oneway:
            cmd.flags |= FLAG_ONEWAY
        return cmd

    opaques = iter(range(1, 100))
    half = encode_record(b"orders", b"next", encode_properties({"TRAN_MSG": "true", "PGROUP": "tx-p"}))
    nxt = broker_api.send_message("orders", 0, "tx-p", half)
    nxt.opaque = 50
    conn.data_received(encode_bytes(end(first, oneway=True)) + encode_bytes(nxt))
    answers = [c for chunk in transport.calls for c in FrameDecoder(16 << 20).feed(chunk)]
    assert [(a.opaque, a.code) for a in answers] == [(50, ResponseCode.SUCCESS)]
    assert stored(cluster, "orders") == []  # not committed yet
    await asyncio.sleep(0)
    assert [m.body for m in stored(cluster, "orders")] == [b"first"]
    # Asked for an answer: applied first, its outcome in the remark.
    conn.data_received(encode_bytes(end(second, oneway=False)))
    answers = [c for chunk in transport.calls[1:] for c in FrameDecoder(16 << 20).feed(chunk)]
    assert [a.remark for a in answers] == ["commit"]
    assert sorted(m.body for m in stored(cluster, "orders")) == [b"first", b"second"]
    conn.connection_lost(None)


async def test_a_check_round_reads_only_the_half_messages_still_waiting(
    clocked: LocalCluster, clock: FakeClock
) -> None:
    """A round skips, unread, every half message resolved since the last one (a busy broker's round
    costs what waits, not what arrived), and still finds the waiting ones and their put-back copies."""
    cluster = clocked
    broker = cluster.brokers[0]
    store = broker.store
    assert store is not None
    tx = broker.transaction.service()
    tx.refresh()
    read: list[int] = []
    get_messages = store.get_messages

    def counting(group: str, topic: str, queue_id: int, offset: int, count: int, *args: object, **kw: object):
        res = get_messages(group, topic, queue_id, offset, count, *args, **kw)  # type: ignore[arg-type]
        if topic == HALF_TOPIC:
            read.extend(pos for buf in res.buffers for pos, _ in iter_spans(buf))
        return res

    store.get_messages = counting  # type: ignore[method-assign]
    waiting = {10, 25, 26, 49}
    async with TransactionProducer(cluster.namesrv_addr, "tx-p", lambda m: UNKNOWN) as producer:
        halves = [await producer.send_half(Message("orders", str(i).encode())) for i in range(50)]
        for i, half in enumerate(halves):
            if i not in waiting:
                await producer.end_transaction(half, COMMIT if i % 2 else ROLLBACK)
        await wait_until(lambda: tx.commits + tx.rollbacks == 46, what="46 outcomes")
        read.clear()
        assert sorted(e.queue_offset for e in tx.waiting()) == sorted(halves[i].queue_offset for i in waiting)
        assert len(read) == len(waiting)  # three runs read: 10, 25-26, 49
        age(clock, 1.0)  # their timeout: each is put back (a copy at the queue's end) and checked
        assert check_round(broker) == len(waiting)
        await producer.end_transaction(halves[25], COMMIT)  # one outcome after its copy was made
        await wait_until(lambda: tx.commits == 24, what="the late commit")
        read.clear()
        assert sorted(e.origin for e in tx.waiting()) == sorted(halves[i].queue_offset for i in waiting - {25})
        assert len(read) == len(waiting)  # the four copies: none of them is an origin
    assert sorted(m.body for m in stored(cluster, "orders")) == sorted(
        str(i).encode() for i in range(50) if i % 2 and i not in waiting - {25}
    )
