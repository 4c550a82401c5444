"""How the send handler answers what the store did."""

from __future__ import annotations

from pymq.broker.handlers.send import SendHandlers
from pymq.broker.store import PutResult, PutStatus
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command


def test_disk_full_send_answers_service_not_available() -> None:
    """The broker turns the store's disk-full refusal into SERVICE_NOT_AVAILABLE with the reason."""
    cmd = Command.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"")
    resp = SendHandlers.build_response(
        cmd, 0, [PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="disk full: writes refused until cleanup")]
    )
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in (resp.remark or "")
