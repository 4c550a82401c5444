"""GET_CONSUMER_RUNNING_INFO on the broker (issue 33): it finds the client's channel, asks it with a timeout
and answers with the client's body, or says which client is not there or did not answer."""

from __future__ import annotations

import asyncio
from typing import Any

from pymq.broker.consumers import ConsumerManager
from pymq.broker.handlers.running_info import RunningInfoHandlers
from pymq.errors import ConnectionClosedError, RequestTimeoutError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.requests import ConsumerRunningInfoRequest
from pymq.security.permissions import REQUIREMENTS


class ClientChan:
    """A consumer client's channel: ``answer`` says what its ``request`` does."""

    def __init__(self, answer: Any) -> None:
        self.attrs: dict[str, Any] = {}
        self.remote_addr = "10.0.0.1:5000"
        self.is_open = True
        self.answer = answer
        self.asked: list[tuple[Command, float]] = []

    def add_close_callback(self, cb: Any) -> None:
        pass

    def push_oneway(self, cmd: Command) -> None:
        pass

    def close(self) -> None:
        self.is_open = False

    async def request(self, cmd: Command, timeout: float) -> Command:
        self.asked.append((cmd, timeout))
        if isinstance(self.answer, Exception):
            raise self.answer
        if self.answer == "stuck":  # waits for room in an output buffer that never drains
            await asyncio.Event().wait()
        if self.answer == "never":  # as a connection does: the request times out
            await asyncio.sleep(timeout)
            raise RequestTimeoutError(f"no response from {self.remote_addr} within {timeout:.3f}s")
        return cmd.response(*self.answer) if isinstance(self.answer, tuple) else cmd.response(body=self.answer)


def registered(channel: ClientChan, client_id: str = "10.0.0.1@7", protocol: str = "pymq") -> ConsumerManager:
    mgr = ConsumerManager()
    mgr.register(
        "g1",
        client_id,
        channel,  # type: ignore[arg-type]
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        subscriptions=[],
        protocol=protocol,
    )
    return mgr


async def ask(mgr: ConsumerManager, group: str = "g1", client_id: str = "10.0.0.1@7", jstack: bool = False) -> Command:
    h = ConsumerRunningInfoRequest(consumer_group=group, client_id=client_id, jstack_enable=jstack)
    handlers = RunningInfoHandlers(consumers=mgr, client_timeout=0.05)
    handler = handlers.table()[RequestCode.GET_CONSUMER_RUNNING_INFO]
    return await handler(Command.request(RequestCode.GET_CONSUMER_RUNNING_INFO, h.to_ext()), None)  # type: ignore[arg-type,misc]


async def test_the_clients_answer_is_relayed_with_its_body() -> None:
    chan = ClientChan(b"\x81\xa1a\x01")
    resp = await ask(registered(chan), jstack=True)
    assert resp.code == ResponseCode.SUCCESS and resp.body_bytes() == b"\x81\xa1a\x01"
    ((sent, timeout),) = chan.asked
    assert sent.code == RequestCode.GET_CONSUMER_RUNNING_INFO and not sent.is_oneway and timeout == 0.05
    assert ConsumerRunningInfoRequest.from_ext(sent.ext) == ConsumerRunningInfoRequest(
        consumer_group="g1", client_id="10.0.0.1@7", jstack_enable=True
    )


async def test_an_unknown_client_or_group_is_named() -> None:
    mgr = registered(ClientChan(b""))
    resp = await ask(mgr, client_id="10.9.9.9@1")
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert "10.9.9.9@1" in resp.remark and "g1" in resp.remark and "connected: 10.0.0.1@7" in resp.remark
    resp = await ask(mgr, group="nobody")
    assert (
        resp.code == ResponseCode.CONSUMER_NOT_ONLINE
        and "group nobody is not connected to this broker (the group has no connected consumer)" in resp.remark
    )


async def test_a_client_that_never_answers_is_a_system_error_saying_so() -> None:
    resp = await ask(registered(ClientChan("never")))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "consumer 10.0.0.1@7 of group g1 did not answer within 0.05s"


async def test_a_client_whose_connection_is_stuck_is_a_system_error_too() -> None:
    resp = await ask(registered(ClientChan("stuck")))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "did not answer within 0.05s" in resp.remark


async def test_a_client_gone_while_asked_or_closed() -> None:
    resp = await ask(registered(ClientChan(ConnectionClosedError("closed"))))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "disconnected before answering" in resp.remark
    chan = ClientChan(b"")
    mgr = registered(chan)
    chan.is_open = False
    assert (await ask(mgr)).code == ResponseCode.CONSUMER_NOT_ONLINE and not chan.asked


async def test_the_clients_refusal_is_passed_on_and_grpc_clients_are_not_asked() -> None:
    resp = await ask(registered(ClientChan((ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not supported"))))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert resp.remark == "consumer 10.0.0.1@7 of group g1 answered: not supported"
    chan = ClientChan(b"")
    resp = await ask(registered(chan, protocol="grpc"))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "gRPC" in resp.remark and not chan.asked


def test_it_needs_admin_under_acl() -> None:
    assert REQUIREMENTS[RequestCode.GET_CONSUMER_RUNNING_INFO].admin
