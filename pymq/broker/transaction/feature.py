"""Transactional messages on one broker, as one part the app wires: the half-message put hook,
the current outcome service, its handlers, the master-only check-back, and its state file.

The outcome service (:class:`TransactionalMessageService`) is made here and only here: at
startup (loaded from ``config/transactionOffset.json``), again when a demotion drops the
master's state (a slave lists pending half messages from the start of what it replicated),
and at a promotion unless the startup one is still fresh (what a slave tracked may predate a
truncation: a promoted broker reads the half and op queues again from their positions).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.store.config_files import remove_json
from pymq.broker.transaction.acl import transaction_resolvers
from pymq.broker.transaction.check import TransactionCheckService
from pymq.broker.transaction.handlers import TransactionHandlers
from pymq.broker.transaction.hook import TransactionHook
from pymq.broker.transaction.service import STATE_FILE, TransactionalMessageService
from pymq.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from pymq.broker.consumers import ClientChannel
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.topics import TopicConfigManager
    from pymq.config import BrokerConfig
    from pymq.security.permissions import Resolver


class Transactions:
    """The transaction feature of a broker (see the module docstring)."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        topics: TopicConfigManager,
        stats: BrokerStats,
        producer_channels: Callable[[str], list[ClientChannel]],
        address: Callable[[], str],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.topics = topics
        self.stats = stats
        self.producer_channels = producer_channels
        self.address = address
        #: transaction timeouts and op-record times (a FakeClock in tests)
        self.clock = clock
        self.config_dir = Path(config.store.store_dir) / "config"
        #: first on the put path: half messages are never delayed
        self.hook = TransactionHook()
        self.store: MessageStore | None = None
        self._service: TransactionalMessageService | None = None
        #: whether the service was loaded at startup as master and not used by a slave since
        self._fresh = False
        self.check: TransactionCheckService | None = None

    def open(self, store: MessageStore, *, master: bool) -> None:
        """Load the outcome service once the store is up (a master's stays fresh for its first term)."""
        self.store = store
        self._service = self._new_service(load=True)
        self._fresh = master

    def service(self) -> TransactionalMessageService:
        """The current outcome service (a role change may replace it: read it per request)."""
        if self._service is None:
            raise RuntimeError("transactions are not open (the store is not started)")
        return self._service

    def maybe_service(self) -> TransactionalMessageService | None:
        return self._service

    def handlers(self, *, writable: Callable[[], bool]) -> TransactionHandlers:
        """The request handlers; ``writable``: whether the broker takes writes now (its role)."""
        return TransactionHandlers(transactions=self.service, writable=writable)

    def acl_resolvers(self) -> dict[int, Resolver]:
        """END_TRANSACTION without a topic is checked on its half message's topic (RocketMQ 4 clients)."""
        return transaction_resolvers(self.maybe_service)

    async def start_check(self) -> None:
        """Master services: run check-back (a promoted broker first reads the queues again)."""
        if not self._fresh:
            self._service = self._new_service(load=True)
        self._fresh = False
        self.check = TransactionCheckService(
            self.service(), self.config, self.producer_channels, self.address, clock=self.clock
        )
        await self.check.start()

    async def stop_check(self) -> None:
        check, self.check = self.check, None
        if check is not None:
            await check.stop()

    def drop_state(self) -> None:
        """A slave's (or demoted master's) positions are another history's: delete them, list from the start."""
        remove_json(self.config_dir / STATE_FILE)
        if self.store is not None:
            self._service = self._new_service(load=False)
        self._fresh = False

    def _new_service(self, *, load: bool) -> TransactionalMessageService:
        assert self.store is not None
        service = TransactionalMessageService(self.store, self.topics, self.stats, self.config_dir, clock=self.clock)
        if load:
            service.load()
        return service


__all__ = ["STATE_FILE", "Transactions"]
