"""Role gating: what a broker that is not a writable master refuses, as one interceptor instead of
a check in each handler.

A slave serves reads; writes belong to its master. A fenced or promoting master refuses the
same. :func:`follow_role` keeps the gate on the dispatcher exactly while the role is not
writable (an observer of :class:`~pymq.broker.role.state.RoleMachine`). The table keeps the answers handlers
used to give (codes and remarks unchanged). UPDATE_CONSUMER_OFFSET is accepted and
ignored, as before: offsets are the master's, and a consumer reading from a slave keeps
committing without errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.transport.channel import Channel
from pymq.transport.interceptor import Interceptor

if TYPE_CHECKING:
    from pymq.broker.role.state import Role, RoleMachine
    from pymq.transport.dispatch import Dispatcher

#: request code -> (response code, remark) a slave answers instead of running the handler
SLAVE_REFUSALS: dict[int, tuple[int, str | None]] = {
    RequestCode.SEND_MESSAGE: (ResponseCode.SERVICE_NOT_AVAILABLE, "broker is a slave and cannot accept messages"),
    RequestCode.SEND_BATCH_MESSAGE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "broker is a slave and cannot accept messages",
    ),
    RequestCode.CONSUMER_SEND_MSG_BACK: (ResponseCode.SERVICE_NOT_AVAILABLE, "send back goes to the master"),
    RequestCode.LOCK_BATCH_MQ: (ResponseCode.SERVICE_NOT_AVAILABLE, "queue locks live on the master"),
    RequestCode.UPDATE_CONSUMER_OFFSET: (ResponseCode.SUCCESS, None),
    RequestCode.END_TRANSACTION: (ResponseCode.SERVICE_NOT_AVAILABLE, "transactions end on the master"),
    # pop writes checkpoints and acks to the revive log: the master's
    RequestCode.POP_MESSAGE: (ResponseCode.SERVICE_NOT_AVAILABLE, "pop consumption is served by the master"),
    RequestCode.ACK_MESSAGE: (ResponseCode.SERVICE_NOT_AVAILABLE, "pop consumption is served by the master"),
    RequestCode.BATCH_ACK_MESSAGE: (ResponseCode.SERVICE_NOT_AVAILABLE, "pop consumption is served by the master"),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "pop consumption is served by the master",
    ),
}


class ReadOnlyRole(Interceptor):
    """Answers the codes of ``refusals`` itself; a slave broker installs it with SLAVE_REFUSALS."""

    def __init__(self, refusals: dict[int, tuple[int, str | None]] | None = None) -> None:
        self.refusals = dict(SLAVE_REFUSALS if refusals is None else refusals)
        self.codes = frozenset(int(c) for c in self.refusals)

    def before(self, request: Command, channel: Channel) -> Command | None:
        code, remark = self.refusals[request.code]
        return request.response(code, remark)


def follow_role(machine: RoleMachine, dispatcher: Dispatcher, gate: ReadOnlyRole) -> None:
    """Put ``gate`` on ``dispatcher`` now if the role is not writable, and keep it so at every transition."""

    def follow(_old: Role | None, new: Role) -> None:
        installed = gate in dispatcher.interceptors
        if new.writable and installed:
            dispatcher.remove_interceptor(gate)
        elif not new.writable and not installed:
            dispatcher.add_interceptor(gate)

    follow(None, machine.current)
    machine.subscribe(follow)


__all__ = ["SLAVE_REFUSALS", "ReadOnlyRole", "follow_role"]
