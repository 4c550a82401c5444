"""The proxy's AckMessage acks: coalesced per group into batch acks, each caller told its own outcome."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pymq.errors import PymqError
from pymq.grpc_proxy.acks import ProxyAcks
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body


def test_acks_of_one_turn_go_as_one_batch_and_a_refused_handle_fails_alone() -> None:
    sent: list[tuple[str, int, list[str]]] = []

    async def invoke(addr: str, cmd: Command) -> Command:
        handles = decode_body(cmd.body)["receiptHandles"] if cmd.code == RequestCode.BATCH_ACK_MESSAGE else ["one"]
        sent.append((addr, cmd.code, handles))
        codes = [int(ResponseCode.INVALID_RECEIPT_HANDLE) if h == "stale" else 0 for h in handles]
        body = encode_body({"codes": codes, "remarks": ["stale handle" if c else "" for c in codes]})
        return Command(int(ResponseCode.SUCCESS), 0, 1, None, {}, body)

    async def go() -> list[Any]:
        acks = ProxyAcks(invoke)
        return await asyncio.gather(
            *(acks.ack("b:1", "g", "t", h) for h in ("h1", "stale", "h3")), return_exceptions=True
        )

    outcomes = asyncio.run(go())
    assert sent == [("b:1", RequestCode.BATCH_ACK_MESSAGE, ["h1", "stale", "h3"])]
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], PymqError) and "stale handle" in str(outcomes[1])


def test_a_lone_ack_is_a_plain_ack_and_its_refusal_raises() -> None:
    async def invoke(addr: str, cmd: Command) -> Command:
        assert cmd.code == RequestCode.ACK_MESSAGE
        return Command(int(ResponseCode.INVALID_RECEIPT_HANDLE), 0, 1, "expired", {}, b"")

    with pytest.raises(PymqError, match="expired"):
        asyncio.run(ProxyAcks(invoke).ack("b:1", "g", "t", "h"))
