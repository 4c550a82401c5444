"""Replication's requests on the normal port: the delay offsets a slave copies (GET_ALL_DELAY_OFFSET)
and role changes (NOTIFY_BROKER_ROLE_CHANGED, see :mod:`pymq.broker.role.change`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import BrokerRoleChangeRequest
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler


class ReplicationHandlers:
    def __init__(
        self,
        *,
        delay_offsets: Callable[[], dict[int, int]],
        role_change: Callable[[BrokerRoleChangeRequest], Awaitable[dict[str, Any]]],
    ) -> None:
        self.delay_offsets = delay_offsets
        self.role_change = role_change

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ALL_DELAY_OFFSET: self.all_delay_offsets,
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.change_role,
        }

    def all_delay_offsets(self, cmd: Command, channel: Channel) -> Command:
        table = {str(level): off for level, off in sorted(self.delay_offsets().items())}
        return cmd.response(body=encode_body({"offsetTable": table}))

    def change_role(self, cmd: Command, channel: Channel) -> Awaitable[Command]:
        req = BrokerRoleChangeRequest.from_ext(cmd.ext)

        async def run() -> Command:
            state = await self.role_change(req)
            return cmd.response(body=encode_body(state))

        return run()
