"""The operators' handler families that reach past the broker (issue 33): requests relayed to a consumer
client (its running info, consuming one message directly) and the ACL accounts' file."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pymq.broker.handlers.acl_accounts import AclHandlers
from pymq.broker.handlers.consume_directly import ConsumeDirectlyHandlers
from pymq.broker.handlers.running_info import RunningInfoHandlers

if TYPE_CHECKING:
    from pymq.broker.consumers import ConsumerManager
    from pymq.broker.store import MessageStore
    from pymq.security.interceptor import AclInterceptor


def operator_families(
    consumers: ConsumerManager, store: MessageStore, broker_name: str, acl: Callable[[], AclInterceptor | None]
) -> tuple[Any, ...]:
    return (
        RunningInfoHandlers(consumers=consumers),
        ConsumeDirectlyHandlers(consumers=consumers, store=store, broker_name=broker_name),
        AclHandlers(acl=acl),
    )
