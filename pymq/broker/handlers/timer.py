"""GET_TIMER_METRICS (61, RocketMQ's code): pending timer messages per real topic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler


class TimerHandlers:
    def __init__(self, *, metrics: Callable[[], dict[str, Any]] | None) -> None:
        #: the timer service's metrics (None: this broker runs no timer service)
        self.metrics = metrics

    def table(self) -> dict[int, Handler]:
        return {RequestCode.GET_TIMER_METRICS: self.timer_metrics}

    def timer_metrics(self, cmd: Command, channel: Channel) -> Command:
        if self.metrics is None:
            remark = "no timer service on this broker (a slave, or timer_enable is off)"
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark)
        return cmd.response(body=encode_body(self.metrics()))
