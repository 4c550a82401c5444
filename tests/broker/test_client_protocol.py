"""The protocol a client is listed under: the heartbeat body's ``protocol`` (a proxy heartbeating for its
clients), else its channel's ``attrs["protocol"]``, else "pymq" (older bodies carry none)."""

from __future__ import annotations

from typing import Any

import pytest

from pymq.broker.consumers import ConsumerManager
from pymq.broker.handlers.clients import ClientHandlers
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body


class Chan:
    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        self.attrs: dict[str, Any] = attrs or {}
        self.remote_addr = "10.0.0.1:5000"

    def add_close_callback(self, cb: Any) -> None:
        pass


class NoGroups:
    def get(self, group: str) -> None:
        return None


def heartbeat(body: dict[str, Any], channel: Chan) -> ConsumerManager:
    mgr = ConsumerManager()
    handlers = ClientHandlers(consumers=mgr, subscription_groups=NoGroups(), topics=None, role=None)  # type: ignore[arg-type]
    resp = handlers.heartbeat(Command.request(RequestCode.HEART_BEAT, body=encode_body(body)), channel)  # type: ignore[arg-type]
    assert resp.code == 0
    return mgr


BASE = {
    "clientID": "c1",
    "language": "JAVA",
    "version": 7,
    "producerDataSet": [{"groupName": "pg"}],
    "consumerDataSet": [{"groupName": "cg", "subscriptionDataSet": [{"topic": "t", "subString": "*"}]}],
}


@pytest.mark.parametrize(
    ("body_protocol", "attrs", "listed"),
    [
        (None, {}, "pymq"),
        (None, {"protocol": "remoting"}, "remoting"),
        ("grpc", {"protocol": "pymq"}, "grpc"),
        ("grpc", {}, "grpc"),
    ],
)
def test_protocol_from_body_then_channel_then_pymq(
    body_protocol: str | None, attrs: dict[str, Any], listed: str
) -> None:
    body = dict(BASE, **({"protocol": body_protocol} if body_protocol else {}))
    mgr = heartbeat(body, Chan(attrs))
    info = mgr.connection_info("cg")
    assert info is not None
    [conn] = info["connections"]
    assert (conn["clientId"], conn["language"], conn["version"], conn["protocol"]) == ("c1", "JAVA", 7, listed)
    [prod] = mgr.producer_table()["pg"]
    assert (prod["clientId"], prod["language"], prod["protocol"]) == ("c1", "JAVA", listed)
