"""Deferred handler answers: written from the giver's own call (no loop pass), one slot each."""

from __future__ import annotations

import asyncio

from pymq.errors import RemoteError
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Command
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Deferred, Dispatcher, HandlerResult
from tests.transport_doubles import RecordingChannel as _Channel
from tests.transport_doubles import request as _request

WAIT = 1


async def test_a_deferred_answer_is_written_when_given_and_frees_its_slot() -> None:
    given: list[Deferred] = []

    def wait(cmd: Command, channel: Channel) -> HandlerResult:
        d = Deferred()
        given.append(d)
        return d

    d = Dispatcher({WAIT: wait})
    ch = _Channel(max_parked=2)
    for opaque in (1, 2, 3):
        d.dispatch(ch, _request(WAIT, opaque))
    assert ch.inflight == 3 and d.in_flight == 3 and not ch.written
    # given out of order: each answer goes out at once, from the giver's call, with its opaque
    given[1].set_result(Command.request(0).response(ResponseCode.SUCCESS))
    assert [(c.opaque, c.code) for c in ch.written] == [(2, ResponseCode.SUCCESS)]
    given[0].set_exception(RemoteError(ResponseCode.SYSTEM_BUSY, "busy"))
    assert [(c.opaque, c.code) for c in ch.written][-1] == (1, ResponseCode.SYSTEM_BUSY)
    given[0].set_result(Command.request(0).response())  # a second outcome is ignored
    assert len(ch.written) == 2 and ch.inflight == 1 and d.in_flight == 1
    # shutdown: a Deferred never given is cancelled after the drain's time: no answer, slot freed
    await d.drain(0.05)
    assert len(ch.written) == 2 and ch.inflight == 0 and d.in_flight == 0


async def test_a_deferred_given_before_the_dispatcher_takes_it_is_answered_at_once() -> None:
    def ready(cmd: Command, channel: Channel) -> HandlerResult:
        d = Deferred()
        d.set_result(cmd.response(ext={"early": True}))
        return d

    d = Dispatcher({WAIT: ready})
    ch = _Channel(max_parked=2)
    d.dispatch(ch, _request(WAIT, 7))
    assert [(c.opaque, c.ext) for c in ch.written] == [(7, {"early": True})] and ch.inflight == 0
    await asyncio.sleep(0)
