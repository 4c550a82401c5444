"""GET_TIMER_METRICS (61, RocketMQ's code): pending timer messages per real topic; GET_TIMER_CHECK_POINT
(60): the timer service's delivery state, which slaves copy to take delivery over at a promotion.

Both answer only where a timer service delivers: timers enabled, and the broker not a slave
(read from the role at each request: a role change swaps no handler)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.broker.role.state import RoleMachine

NO_TIMER_SERVICE = "no timer service on this broker (a slave, or timer_enable is off)"


class TimerView(Protocol):
    def metrics(self) -> dict[str, Any]: ...

    def sync_state(self) -> dict[str, Any]: ...


class TimerHandlers:
    def __init__(self, *, timer: TimerView | None, role: RoleMachine) -> None:
        #: the timer service (None: timer_enable is off)
        self.timer = timer
        self.role = role

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_TIMER_METRICS: self.timer_metrics,
            RequestCode.GET_TIMER_CHECK_POINT: self.timer_checkpoint,
        }

    def _serving(self) -> TimerView | None:
        return self.timer if self.timer is not None and not self.role.current.is_slave else None

    def timer_checkpoint(self, cmd: Command, channel: Channel) -> Command:
        timer = self._serving()
        if timer is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, NO_TIMER_SERVICE)
        return cmd.response(body=encode_body(timer.sync_state()))

    def timer_metrics(self, cmd: Command, channel: Channel) -> Command:
        timer = self._serving()
        if timer is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, NO_TIMER_SERVICE)
        return cmd.response(body=encode_body(timer.metrics()))
