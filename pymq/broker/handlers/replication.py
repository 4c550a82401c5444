"""Replication's requests on the normal port: the delay offsets a slave copies (GET_ALL_DELAY_OFFSET)
and the role change (see :mod:`pymq.broker.ha.role_change`)."""

from __future__ import annotations

from collections.abc import Callable

from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler


class ReplicationHandlers:
    def __init__(self, *, delay_offsets: Callable[[], dict[int, int]]) -> None:
        self.delay_offsets = delay_offsets

    def table(self) -> dict[int, Handler]:
        return {RequestCode.GET_ALL_DELAY_OFFSET: self.all_delay_offsets}

    def all_delay_offsets(self, cmd: Command, channel: Channel) -> Command:
        table = {str(level): off for level, off in sorted(self.delay_offsets().items())}
        return cmd.response(body=encode_body({"offsetTable": table}))
