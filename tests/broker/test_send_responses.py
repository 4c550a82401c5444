"""How the send handler answers what the store did."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pymq.broker.ha.acks import PENDING, REPLICATED, TIMED_OUT
from pymq.broker.handlers.send import SendHandlers
from pymq.broker.role.state import RoleMachine
from pymq.broker.stats import BrokerStats
from pymq.broker.store import PutResult, PutStatus
from pymq.broker.store.file_maker import BACKLOG_REASON
from pymq.broker.subscription_groups import SubscriptionGroupManager
from pymq.broker.topics import TopicConfigManager
from pymq.config import BrokerConfig
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.requests import SendMessageResponse
from pymq.protocol.route import PERM_READ, TopicConfig
from pymq.transport.dispatch import Deferred


def test_disk_full_send_answers_service_not_available() -> None:
    """The broker turns the store's disk-full refusal into SERVICE_NOT_AVAILABLE with the reason."""
    cmd = Command.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"")
    resp = SendHandlers.build_response(
        cmd, 0, [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="disk full: writes refused until cleanup")]
    )
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in (resp.remark or "")


def test_queue_file_backlog_send_answers_service_not_available() -> None:
    """A backlog of consume-queue files not made is answered as a full disk is, the reason as the remark."""
    reason = f"{BACKLOG_REASON} (cannot open /s/consumequeue/T/0/x: [Errno 24] Too many open files): writes refused"
    cmd = Command.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"")
    resp = SendHandlers.build_response(cmd, 0, [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=reason)])
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and reason in (resp.remark or "")


def _handlers(
    tmp_path: Path, results: list[PutResult], wait_replicated: Any = None
) -> tuple[SendHandlers, list[tuple[str, int]]]:
    role = {"role": "SYNC_MASTER"} if wait_replicated is not None else {}
    config = BrokerConfig.model_validate({"port": 0, "store": {"store_dir": str(tmp_path / "store")}, **role})
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.upsert(TopicConfig("T", 4, 4))
    topics.upsert(TopicConfig("RO", 4, 4, perm=PERM_READ))
    puts: list[tuple[str, int]] = []

    def put(topic: str, queue_id: int, body: Any) -> list[PutResult]:
        puts.append((topic, queue_id))
        return results

    handlers = SendHandlers(
        store=None,  # type: ignore[arg-type]  # ASYNC_FLUSH: the store is only the group commit's
        put_messages=put,
        topics=topics,
        subscription_groups=SubscriptionGroupManager(tmp_path / "groups.json"),
        stats=BrokerStats(),
        config=config,
        address="127.0.0.1:1",
        role=RoleMachine.from_config(config),
        wait_replicated=wait_replicated,
    )
    return handlers, puts


def test_a_stored_single_send_answers_what_build_response_answers(tmp_path: Path) -> None:
    """The handler builds a stored single send's answer inline: the same as build_response's."""
    ok = [PutResult(PutStatus.PUT_OK, 17, 4096, 1200, 0, "T", 2)]
    handlers, puts = _handlers(tmp_path, ok)
    cmd = Command(RequestCode.SEND_MESSAGE, 9, 0, None, {"topic": "T", "queueId": 2}, b"record")
    resp = handlers.send(cmd, None)  # type: ignore[arg-type]
    ref = SendHandlers.build_response(cmd, 2, ok)
    assert isinstance(resp, Command) and puts == [("T", 2)]
    assert (resp.code, resp.opaque, resp.flags, resp.remark, resp.ext) == (
        ref.code,
        ref.opaque,
        ref.flags,
        ref.remark,
        ref.ext,
    )
    assert resp.ext == {"queueId": 2, "queueOffset": 17, "commitLogOffsets": [4096]}
    assert handlers.stats.put_msgs["T"] == 1 and handlers.stats.put_bytes["T"] == 1200


def test_a_sync_master_send_is_answered_by_its_replication_waiter(tmp_path: Path) -> None:
    """SYNC_MASTER: the handler hands the replication a waiter for the records' end; the answer
    is a Deferred (no future, no task) that waiter gives: SUCCESS once replicated, FLUSH_SLAVE_TIMEOUT
    on time-out; no slave in sync answers SLAVE_NOT_AVAILABLE at once, and a send the slaves
    already hold is answered inline."""
    asked: list[tuple[int, Any]] = []
    mode = {"in_sync": True, "held": False}

    def wait_replicated(end: int, waiter: Any) -> Any:
        if not mode["in_sync"]:
            return None
        asked.append((end, waiter))
        return REPLICATED if mode["held"] else PENDING

    handlers, _ = _handlers(tmp_path, [PutResult(PutStatus.PUT_OK, 17, 4096, 1200, 0, "T", 2)], wait_replicated)

    async def go() -> None:
        def send() -> Any:
            cmd = Command(RequestCode.SEND_MESSAGE, 9, 0, None, {"topic": "T", "queueId": 2}, b"r")
            return handlers.send(cmd, None)  # type: ignore[arg-type]

        for outcome, code in ((REPLICATED, ResponseCode.SUCCESS), (TIMED_OUT, ResponseCode.FLUSH_SLAVE_TIMEOUT)):
            answer = send()
            assert isinstance(answer, Deferred) and not answer.done()
            given: list[tuple[Any, Any]] = []
            answer.then(lambda resp, error: given.append((resp, error)))  # noqa: B023
            end, waiter = asked[-1]
            assert end == 4096 + 1200 and not waiter.done() and not given
            waiter.set_result(outcome)
            assert waiter.done() and answer.done()
            assert [(resp.code, error) for resp, error in given] == [(code, None)]
        mode["held"] = True
        resp = send()
        assert isinstance(resp, Command) and resp.code == ResponseCode.SUCCESS
        mode["in_sync"] = False
        resp = send()
        assert isinstance(resp, Command) and resp.code == ResponseCode.SLAVE_NOT_AVAILABLE

    asyncio.run(go())


def test_sends_off_the_usual_path_get_the_full_checks_in_order(tmp_path: Path) -> None:
    ok = [PutResult(PutStatus.PUT_OK, 0, 100, 0, 0, "T", 0)]
    handlers, puts = _handlers(tmp_path, ok)

    def send(ext: dict[str, Any]) -> Command:
        resp = handlers.send(Command(RequestCode.SEND_MESSAGE, 1, 0, None, ext, b"record"), None)  # type: ignore[arg-type]
        assert isinstance(resp, Command)
        return resp

    assert send({"topic": "RMQ_SYS_TRANS_HALF_TOPIC", "queueId": 0}).code == ResponseCode.NO_PERMISSION
    assert send({"topic": "NOPE", "queueId": 0}).code == ResponseCode.TOPIC_NOT_EXIST
    assert send({"topic": "RO", "queueId": 0}).code == ResponseCode.NO_PERMISSION
    resp = send({"topic": "T", "queueId": 4})
    assert resp.code == ResponseCode.INVALID_PARAMETER and "queueId" in (resp.remark or "")
    assert puts == []
    assert send({"topic": "T", "queueId": -1}).code == ResponseCode.SUCCESS  # the broker picks a queue
    assert len(puts) == 1 and puts[0][0] == "T" and 0 <= puts[0][1] < 4


def ok(qoff: int, phys: int) -> PutResult:
    return PutResult(PutStatus.PUT_OK, qoff, phys, 100, 1, "T", 3)


def test_a_stored_batch_answers_its_offsets() -> None:
    cmd = Command.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"")
    resp = SendHandlers.build_response(cmd, 3, [ok(7, 1000), ok(8, 1100), ok(9, 1200)])
    assert resp.code == ResponseCode.SUCCESS
    assert resp.ext == SendMessageResponse.build_ext(queue_id=3, queue_offset=7, commit_log_offsets=[1000, 1100, 1200])


def test_a_partly_refused_batch_names_each_status() -> None:
    cmd = Command.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"")
    refused = PutResult(PutStatus.MESSAGE_ILLEGAL, reason="body crc mismatch")
    resp = SendHandlers.build_response(cmd, 3, [refused, ok(7, 1000), ok(8, 1100)])
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark == "2/3 stored; MESSAGE_ILLEGAL: body crc mismatch"
    assert resp.ext == SendMessageResponse.build_ext(
        queue_id=3, queue_offset=7, commit_log_offsets=[-1, 1000, 1100], statuses=[int(PutStatus.MESSAGE_ILLEGAL), 0, 0]
    )


def test_stats_count_stored_messages_and_bytes() -> None:
    stats = BrokerStats()
    stats.record_put("T", [ok(7, 1000), ok(8, 1100)])
    stats.record_put("T", [PutResult(PutStatus.MESSAGE_ILLEGAL), ok(9, 1200)])
    assert (stats.put_msgs["T"], stats.put_bytes["T"], stats.put_total, stats.put_failed) == (3, 300, 3, 1)
