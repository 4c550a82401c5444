"""How the send handler answers what the store did."""

from __future__ import annotations

from pymq.broker.handlers.send import SendHandlers
from pymq.broker.stats import BrokerStats
from pymq.broker.store import PutResult, PutStatus
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.requests import SendMessageResponse


def test_disk_full_send_answers_service_not_available() -> None:
    """The broker turns the store's disk-full refusal into SERVICE_NOT_AVAILABLE with the reason."""
    cmd = Command.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"")
    resp = SendHandlers.build_response(
        cmd, 0, [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="disk full: writes refused until cleanup")]
    )
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in (resp.remark or "")


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
