"""Parked handler answers (issue 36): held requests take no handler slot, and are bounded per channel."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Dispatcher, HandlerResult, Parked

HELD, QUICK = 1, 2


class _Channel:
    """A ServerChannel that records what the dispatcher writes and counts slots."""

    def __init__(self, max_parked: int) -> None:
        self.remote_addr = "peer:1"
        self.attrs: dict[str, Any] = {}
        self.inflight = 0
        self.parked = 0
        self.max_parked = max_parked
        self.written: list[Command] = []
        self.is_open = True

    def write_command(self, cmd: Command) -> None:
        self.written.append(cmd)

    def handler_finished(self) -> None:
        self.inflight -= 1

    def unparked(self) -> None:
        self.parked -= 1

    def add_close_callback(self, cb: Callable[[Any], None]) -> None:
        pass

    def push_oneway(self, cmd: Command) -> None:
        pass

    def close(self) -> None:
        self.is_open = False


def _request(code: int, opaque: int) -> Command:
    cmd = Command.request(code)
    cmd.opaque = opaque
    return cmd


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
