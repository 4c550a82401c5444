"""CONSUME_MESSAGE_DIRECTLY (309): an admin asks one consumer client (or any client of its group) to consume
one message this broker stores; the broker relays it to the client with the message (issue 33, the
dashboard's "resend to a group").

As in RocketMQ (AdminBrokerProcessor.consumeMessageDirectly): the admin sends the request to the
broker that stores the message, naming it by its offset message id; the broker reads the record at
that commitlog offset, sends the client the same request with the record as the body and its own
broker name, over the channel the client heartbeats on, and answers the admin with the client's
ConsumeMessageDirectlyResult, body untouched (msgpack from pymq's clients, JSON from RocketMQ 4.x
ones). The client runs its listener on the message; no offset moves anywhere.

pymq's addition: an empty ``clientId`` means any connected client of the group (the first, by client
id, whose connection is open and is not a gRPC client behind the proxy).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pymq.errors import ConnectionClosedError, PymqError, RequestTimeoutError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.record import decode_offset_msg_id
from pymq.protocol.requests_operator import ConsumeMessageDirectlyRequest
from pymq.tasks import wait_within
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.consumers import ClientChannel, ConsumerManager
    from pymq.broker.store import MessageStore

log = get_logger("broker.consume_directly")

#: how long the broker waits for the client's listener (below an admin's own 5 s request timeout)
CLIENT_ANSWER_TIMEOUT = 4.0


def pick_member(members: list[ClientChannel], client_id: str) -> ClientChannel | None:
    """The named client, or with ``client_id`` empty the first connected one a request can reach."""
    reachable = [m for m in members if m.channel.is_open and m.protocol != "grpc"]
    if client_id:
        return next((m for m in reachable if m.client_id == client_id), None)
    return min(reachable, key=lambda m: m.client_id, default=None)


class ConsumeDirectlyHandlers:
    def __init__(
        self,
        *,
        consumers: ConsumerManager,
        store: MessageStore,
        broker_name: str,
        client_timeout: float = CLIENT_ANSWER_TIMEOUT,
    ) -> None:
        self.consumers = consumers
        self.store = store
        self.broker_name = broker_name
        self.client_timeout = client_timeout

    def table(self) -> dict[int, Handler]:
        return {RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_directly}

    async def consume_directly(self, cmd: Command, channel: Channel) -> Command:
        h = ConsumeMessageDirectlyRequest.from_ext(cmd.ext)
        who = f"consumer {h.client_id} of group {h.consumer_group}" if h.client_id else f"group {h.consumer_group}"
        try:
            offset = decode_offset_msg_id(h.msg_id)[1]
        except PymqError:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"{h.msg_id!r} is not an offset message id")
        record = self.store.read_record(offset)
        if record is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"no message {h.msg_id} on broker {self.broker_name}")
        body = bytes(record)
        member = pick_member(self.consumers.channels_of(h.consumer_group), h.client_id)
        if member is None:
            known = self.consumers.client_ids(h.consumer_group)
            return cmd.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                (f"{who} is not connected" if h.client_id else f"no consumer of {who} is connected")
                + f" to broker {self.broker_name}"
                + (f" (connected: {', '.join(known)})" if known else " (the group has no connected consumer)"),
            )
        ext = dataclasses.replace(h, client_id=member.client_id, broker_name=self.broker_name).to_ext()
        ask = Command.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, body)
        who = f"consumer {member.client_id} of group {h.consumer_group}"
        try:
            answer = await wait_within(member.channel.request(ask, self.client_timeout), self.client_timeout + 0.5)
        except (TimeoutError, RequestTimeoutError):
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{who} did not answer within {self.client_timeout:g}s")
        except ConnectionClosedError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{who} disconnected before answering")
        if answer.code != ResponseCode.SUCCESS:
            return cmd.response(answer.code, f"{who} answered: {answer.remark or ''}")
        log.info("consumed_directly", group=h.consumer_group, client_id=member.client_id, msg_id=h.msg_id)
        return cmd.response(body=answer.body)
