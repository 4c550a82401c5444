"""GET_TIMER_METRICS (61, RocketMQ's code): pending timer messages per real topic; GET_TIMER_CHECK_POINT
(60): the timer service's delivery state, which slaves copy to take delivery over at a promotion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler


class TimerHandlers:
    def __init__(
        self,
        *,
        metrics: Callable[[], dict[str, Any]] | None,
        checkpoint: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        #: the timer service's metrics (None: this broker runs no timer service)
        self.metrics = metrics
        #: the timer service's delivery state (None: not a master with timers)
        self.checkpoint = checkpoint

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_TIMER_METRICS: self.timer_metrics,
            RequestCode.GET_TIMER_CHECK_POINT: self.timer_checkpoint,
        }

    def timer_checkpoint(self, cmd: Command, channel: Channel) -> Command:
        if self.checkpoint is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, "no timer service on this broker (a slave, or timer_enable is off)"
            )
        return cmd.response(body=encode_body(self.checkpoint()))

    def timer_metrics(self, cmd: Command, channel: Channel) -> Command:
        if self.metrics is None:
            remark = "no timer service on this broker (a slave, or timer_enable is off)"
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark)
        return cmd.response(body=encode_body(self.metrics()))
