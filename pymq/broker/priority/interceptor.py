"""Before a pull of a priority topic's queue: refill it first (the PULL_MESSAGE interceptor)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymq.errors import PymqError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.requests import PullMessageRequest
from pymq.transport.channel import Channel
from pymq.transport.interceptor import Interceptor

if TYPE_CHECKING:
    from pymq.broker.priority.service import PriorityService

log = get_logger("broker.priority")


class PriorityInterceptor(Interceptor):
    """Before a PULL_MESSAGE of a priority topic's queue: refill it if the pull has read everything."""

    codes = frozenset({RequestCode.PULL_MESSAGE})

    def __init__(self, service: PriorityService) -> None:
        self.service = service

    def before(self, request: Command, channel: Channel) -> Command | None:
        if not self.service.hook.refresh():
            return None
        try:
            pull = PullMessageRequest.from_ext(request.ext)
        except PymqError:
            return None  # the handler answers a malformed request
        try:
            self.service.on_pull(pull.topic, pull.queue_id, pull.queue_offset)
        except Exception as exc:  # a refill failure must not fail the pull
            log.warning("priority_refill_failed", reason=repr(exc))
        return None
