"""Parked handler answers (issue 36): held requests take no handler slot, and are bounded per channel."""

from __future__ import annotations

import asyncio

from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Dispatcher, HandlerResult, Parked
from tests.transport_doubles import RecordingChannel as _Channel
from tests.transport_doubles import request as _request

HELD, QUICK = 1, 2


async def test_parked_answers_take_no_handler_slot_and_are_capped() -> None:
    arrived = asyncio.Event()

    async def wait(cmd: Command) -> Command:
        await arrived.wait()
        return cmd.response(ext={"woke": True})

    def held(cmd: Command, channel: Channel) -> HandlerResult:
        return Parked(wait(cmd))

    def quick(cmd: Command, channel: Channel) -> Command:
        return cmd.response()

    d = Dispatcher({HELD: held, QUICK: quick})
    ch = _Channel(max_parked=2)
    for opaque in (1, 2, 3):
        d.dispatch(ch, _request(HELD, opaque))
    await asyncio.sleep(0)
    assert (ch.inflight, ch.parked) == (0, 2)
    # the third found no room: refused at once (the client backs off), nothing left running
    assert [(c.opaque, c.code) for c in ch.written] == [(3, ResponseCode.SYSTEM_BUSY)]
    d.dispatch(ch, _request(QUICK, 4))
    assert ch.written[-1].opaque == 4 and ch.written[-1].code == ResponseCode.SUCCESS
    arrived.set()
    await d.drain(1.0)
    await asyncio.sleep(0)
    assert ch.parked == 0
    assert sorted(c.opaque for c in ch.written if c.ext.get("woke")) == [1, 2]
