"""The broker's ACL resolver for END_TRANSACTION without a ``topic`` (RocketMQ 4 clients).

The ACL checks PUB on the half message's real topic (as RocketMQ 5). A RocketMQ 5 request
names the topic; a RocketMQ 4 one does not, so the ACL interceptor asks this resolver, which
reads the half message the request names (commitlog offset, half-queue offset and producer
group must all match, as for the commit itself) and returns its real topic. A request naming
no such half message is refused (:class:`~pymq.security.permissions.ResourceNotFound`): what
cannot be checked is not allowed. Called only for END_TRANSACTION requests lacking the topic,
and only with ACL on; the commit then reads the same record (the commitlog is append-only, so
the topic checked is the topic committed to).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.requests import EndTransactionRequest
from pymq.security.permissions import Resolver, ResourceNotFound

if TYPE_CHECKING:
    from pymq.broker.transaction.service import TransactionalMessageService


def half_message_topic(transactions: Callable[[], TransactionalMessageService | None]) -> Resolver:
    """END_TRANSACTION's topic from its half message; ``transactions`` gives the broker's current
    service (it is replaced on role changes)."""

    def resolve(cmd: Command) -> str:
        h = EndTransactionRequest.from_ext(cmd.ext)
        service = transactions()
        if service is None:
            raise ResourceNotFound("transactions are not loaded yet")
        found = service.find_half(h, quiet=True)
        offset = h.commit_log_offset
        if found == "not-found":
            raise ResourceNotFound(f"no half message at commitlog offset {offset}")
        if isinstance(found, str):
            raise ResourceNotFound(
                f"the message at commitlog offset {offset} is not the half message the request names"
                f" (half-queue offset {h.tran_state_table_offset}, producer group {h.producer_group})"
            )
        topic = found.real_topic
        if not topic:
            raise ResourceNotFound(f"the half message at commitlog offset {offset} names no real topic")
        return topic

    return resolve


def transaction_resolvers(transactions: Callable[[], TransactionalMessageService | None]) -> dict[int, Resolver]:
    """The broker's resolvers for :func:`pymq.security.daemon.acl_interceptor`."""
    return {RequestCode.END_TRANSACTION: half_message_topic(transactions)}
