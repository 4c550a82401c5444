"""The dispatcher's interceptor chains, driven without sockets through a fake channel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pymq.errors import InvalidRequestError
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import FLAG_ONEWAY, Command
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Dispatcher
from pymq.transport.interceptor import Interceptor
from tests.transport_doubles import RecordingChannel as FakeChannel

A, B = 1, 2


def ok(cmd: Command, channel: Channel) -> Command:
    return cmd.response(ext={"handled": True})


class Gate(Interceptor):
    def __init__(self, codes: frozenset[int] | None = None) -> None:
        self.codes = codes
        self.seen: list[int] = []

    def before(self, request: Command, channel: Channel) -> Command | None:
        self.seen.append(request.code)
        return request.response(ResponseCode.NO_PERMISSION, "gated")


class Log(Interceptor):
    def __init__(self) -> None:
        self.calls: list[tuple[int, int | None, float]] = []
        self.attached_codes: list[int] = []

    def after(self, request: Command, channel: Channel, response: Command | None, seconds: float) -> None:
        self.calls.append((request.code, None if response is None else response.code, seconds))

    def attached(self, codes: Any) -> None:
        self.attached_codes = list(codes)


def request(code: int, oneway: bool = False) -> Command:
    cmd = Command.request(code)
    cmd.opaque = 7
    if oneway:
        cmd.flags |= FLAG_ONEWAY
    return cmd


def test_no_interceptors_means_empty_chains() -> None:
    d = Dispatcher({A: ok})
    assert d._routes[A][1:] == ((), ())
    ch = FakeChannel()
    d.dispatch(ch, request(A))  # no running loop needed: nothing is timed
    assert ch.written[0].ext == {"handled": True} and ch.written[0].opaque == 7


def test_before_answers_instead_of_the_handler_only_for_its_codes() -> None:
    gate = Gate(frozenset({B}))
    d = Dispatcher({A: ok, B: ok})
    d.add_interceptor(gate)
    assert d._routes[A][1] == () and len(d._routes[B][1]) == 1
    ch = FakeChannel()
    d.dispatch(ch, request(A))
    d.dispatch(ch, request(B))
    assert [c.code for c in ch.written] == [0, ResponseCode.NO_PERMISSION]
    assert ch.written[1].remark == "gated" and ch.written[1].opaque == 7
    assert gate.seen == [B]


def test_handlers_registered_later_get_the_chain_too() -> None:
    gate = Gate()
    d = Dispatcher()
    d.add_interceptor(gate)
    d.register(A, ok)
    ch = FakeChannel()
    d.dispatch(ch, request(A))
    assert ch.written[0].code == ResponseCode.NO_PERMISSION


def test_before_that_raises_answers_with_the_error() -> None:
    class Strict(Interceptor):
        def before(self, request: Command, channel: Channel) -> Command | None:
            raise InvalidRequestError("no such thing")

    d = Dispatcher({A: ok})
    d.add_interceptor(Strict())
    ch = FakeChannel()
    d.dispatch(ch, request(A))
    assert (ch.written[0].code, ch.written[0].remark) == (ResponseCode.INVALID_PARAMETER, "no such thing")


def test_before_returning_none_lets_the_request_through() -> None:
    class Pass(Interceptor):
        def before(self, request: Command, channel: Channel) -> Command | None:
            channel.attrs["checked"] = True
            return None

    d = Dispatcher({A: ok})
    d.add_interceptor(Pass())
    ch = FakeChannel()
    d.dispatch(ch, request(A))
    assert ch.written[0].ext == {"handled": True} and ch.attrs["checked"]


async def test_after_sees_answers_errors_and_async_handlers() -> None:
    async def slow(cmd: Command, channel: Channel) -> Command:
        await asyncio.sleep(0.01)
        return cmd.response()

    def boom(cmd: Command, channel: Channel) -> Command:
        raise RuntimeError("x")

    log = Log()
    d = Dispatcher({A: ok, B: slow, 3: boom})
    d.add_interceptor(log)
    assert log.attached_codes == [1, 2, 3]
    ch = FakeChannel()
    d.dispatch(ch, request(A))
    d.dispatch(ch, request(3))
    d.dispatch(ch, request(A, oneway=True))
    d.dispatch(ch, request(B))
    assert ch.inflight == 1
    await d.drain(1.0)
    await asyncio.sleep(0)
    assert [(c, r) for c, r, _ in log.calls] == [(A, 0), (3, ResponseCode.SYSTEM_ERROR), (A, 0), (B, 0)]
    assert log.calls[-1][2] >= 0.009
    assert ch.inflight == 0


def test_unsupported_codes_skip_interceptors() -> None:
    log = Log()
    d = Dispatcher({A: ok})
    d.add_interceptor(log)
    ch = FakeChannel()
    d.dispatch(ch, request(99))
    assert ch.written[0].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and log.calls == []


def test_removed_interceptor_leaves_the_chains() -> None:
    gate, log = Gate(), Log()
    d = Dispatcher({A: ok})
    d.add_interceptor(gate)
    d.add_interceptor(log)
    assert d.interceptors == (gate, log)
    d.remove_interceptor(gate)
    d.remove_interceptor(gate)  # twice is harmless
    assert d.interceptors == (log,) and d._routes[A][1] == ()


def test_chain_order_is_registration_order() -> None:
    order: list[str] = []

    class Mark(Interceptor):
        def __init__(self, name: str) -> None:
            self.name = name

        def before(self, request: Command, channel: Channel) -> Command | None:
            order.append(self.name)
            return None

    d = Dispatcher({A: ok})
    d.add_interceptor(Mark("first"))
    d.add_interceptor(Mark("second"))
    d.dispatch(FakeChannel(), request(A))
    assert order == ["first", "second"]


@pytest.mark.parametrize("override", ["before", "after"])
def test_only_overridden_hooks_join_the_chains(override: str) -> None:
    d = Dispatcher({A: ok})
    d.add_interceptor(Gate() if override == "before" else Log())
    _handler, befores, afters = d._routes[A]
    assert (len(befores), len(afters)) == ((1, 0) if override == "before" else (0, 1))


def test_move_first_runs_an_interceptor_before_earlier_ones() -> None:
    """An access check added after a role gate can be put in front of it."""
    order: list[str] = []

    class Mark(Interceptor):
        def __init__(self, name: str) -> None:
            self.name = name

        def before(self, request: Command, channel: Channel) -> Command | None:
            order.append(self.name)
            return None

    d = Dispatcher({A: ok})
    role, acl = Mark("role"), Mark("acl")
    d.add_interceptor(role)
    d.add_interceptor(acl)
    d.move_first(acl)
    d.dispatch(FakeChannel(), request(A))
    assert order == ["acl", "role"] and d.interceptors == (acl, role)
