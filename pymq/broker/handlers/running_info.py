"""GET_CONSUMER_RUNNING_INFO (307): an admin asks about one consumer client; the broker asks the client.

As in RocketMQ, the broker relays: it finds the client's channel among the group's members
(:class:`~pymq.broker.consumers.ConsumerManager`), sends it the same request over that
channel (:meth:`~pymq.transport.channel.Channel.request`: broker -> client, not oneway) and
answers the admin with the client's answer, body untouched (msgpack from pymq's clients, the
JSON ConsumerRunningInfo from RocketMQ 4.x ones). The client's answer is waited for at most
``client_timeout`` seconds, less than an admin's own request timeout (5 s by default), so the
admin hears why rather than timing out itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.errors import ConnectionClosedError, RequestTimeoutError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.requests import ConsumerRunningInfoRequest
from pymq.tasks import wait_within
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.consumers import ConsumerManager

log = get_logger("broker.running_info")

#: how long the broker waits for the client's answer (RocketMQ waits 5 s; pymq-admin's own timeout is 5 s)
CLIENT_ANSWER_TIMEOUT = 3.0


class RunningInfoHandlers:
    def __init__(self, *, consumers: ConsumerManager, client_timeout: float = CLIENT_ANSWER_TIMEOUT) -> None:
        self.consumers = consumers
        self.client_timeout = client_timeout

    def table(self) -> dict[int, Handler]:
        return {RequestCode.GET_CONSUMER_RUNNING_INFO: self.running_info}

    async def running_info(self, cmd: Command, channel: Channel) -> Command:
        h = ConsumerRunningInfoRequest.from_ext(cmd.ext)
        member = self.consumers.find_channel(h.consumer_group, h.client_id)
        if member is None or not member.channel.is_open:
            known = self.consumers.client_ids(h.consumer_group)
            return cmd.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"consumer {h.client_id} of group {h.consumer_group} is not connected to this broker"
                + (f" (connected: {', '.join(known)})" if known else " (the group has no connected consumer)"),
            )
        if member.protocol == "grpc":
            # a 5.x client heartbeats through the proxy's connection: the proxy would be asked, not the client
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"consumer {h.client_id} of group {h.consumer_group} is a gRPC (RocketMQ 5.x) client: "
                "its running info cannot be asked through the proxy",
            )
        ask = Command.request(RequestCode.GET_CONSUMER_RUNNING_INFO, h.to_ext())
        try:
            # the outer bound also covers waiting for room in a full output buffer (a client not reading)
            answer = await wait_within(member.channel.request(ask, self.client_timeout), self.client_timeout + 0.5)
        except (TimeoutError, RequestTimeoutError):
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"consumer {h.client_id} of group {h.consumer_group} did not answer within {self.client_timeout:g}s",
            )
        except ConnectionClosedError:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"consumer {h.client_id} of group {h.consumer_group} disconnected before answering",
            )
        if answer.code != ResponseCode.SUCCESS:
            log.info(
                "consumer_running_info_refused",
                group=h.consumer_group,
                client_id=h.client_id,
                code=answer.code,
                remark=answer.remark,
            )
            return cmd.response(
                answer.code, f"consumer {h.client_id} of group {h.consumer_group} answered: {answer.remark or ''}"
            )
        # the client's body as it came (pymq: msgpack; RocketMQ 4.x: JSON)
        return cmd.response(body=answer.body)
