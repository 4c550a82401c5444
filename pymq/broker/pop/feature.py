"""Pop consumption on one broker, as one part the app wires: its handlers, its state (open
checkpoints, replayed from the revive log) and revive service while the broker is master, and
its state file.

Pop is served only while this broker is master: :meth:`Pop.start` (a master service) replays
the revive log into a :class:`PopState`, hands it to the handlers and runs the revive service;
:meth:`Pop.stop` takes it back. The handlers are made once (a role change swaps none).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pymq.broker.pop.handlers import PopHandlers
from pymq.broker.pop.receipt import HandleSigner
from pymq.broker.pop.revive import PopState
from pymq.broker.pop.revive import drop_state as drop_revive_offsets
from pymq.broker.service import PeriodicService
from pymq.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from pymq.broker.long_polling import PullHoldService
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.put_path import PutPath
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager
    from pymq.config import BrokerConfig


class Pop:
    """The pop feature of a broker (see the module docstring)."""

    name = "pop"

    def __init__(
        self,
        *,
        config: BrokerConfig,
        topics: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        pull_hold: PullHoldService,
        stats: BrokerStats,
        before_read: Callable[[str, int, int], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.offsets = offsets
        self.pull_hold = pull_hold
        self.stats = stats
        #: called with (topic, queue, offset) before a queue is read (priority topics refill there)
        self.before_read = before_read
        #: pop times and invisible-time deadlines (a FakeClock in tests)
        self.clock = clock
        self.config_dir = Path(config.store.store_dir) / "config"
        self.store: MessageStore | None = None
        self.put_path: PutPath | None = None
        self._handlers: PopHandlers | None = None
        #: open checkpoints and acks while master (None: pop is not served here)
        self.state: PopState | None = None
        self._revive: PeriodicService | None = None
        self._signer: HandleSigner | None = None

    @property
    def signer(self) -> HandleSigner:
        """The receipt handle signer (its secret read or made on first use)."""
        if self._signer is None:
            self._signer = HandleSigner.from_store(self.config_dir)
        return self._signer

    def adopt_secret(self, secret: bytes) -> bool:
        """A slave takes its master's handle secret (kept in ``config/pop.secret``): promoted, it
        accepts the handles its old master issued. False if it had it already."""
        return self.signer.adopt(secret, self.config_dir)

    def handlers(self, store: MessageStore, put_path: PutPath, address: str) -> PopHandlers:
        """The handler family (made once, when the store and the broker's address are known)."""
        self.store, self.put_path = store, put_path
        self._handlers = PopHandlers(
            store=store,
            signer=self.signer,
            topics=self.topics,
            subscription_groups=self.subscription_groups,
            offsets=self.offsets,
            pull_hold=self.pull_hold,
            stats=self.stats,
            config=self.config,
            address=address,
            before_read=self.before_read,
        )
        return self._handlers

    def inflight(self, group: str) -> dict[tuple[str, int], int] | None:
        """Popped messages not acked yet per (topic, queue) of ``group`` (None while not served here)."""
        return self.state.inflight_by_queue(group) if self.state is not None else None

    async def start(self) -> None:
        """Master services: replay the revive log into the pop state, serve pops, run revival."""
        assert self.store is not None and self.put_path is not None and self._handlers is not None
        cfg = self.config
        state = PopState(
            store=self.store,
            put_path=self.put_path,
            topics=self.topics,
            subscription_groups=self.subscription_groups,
            offsets=self.offsets,
            config_dir=self.config_dir,
            cluster=cfg.cluster_name,
            revive_queues=cfg.pop_revive_queue_nums,
            max_inflight=cfg.pop_max_inflight_checkpoints,
            clock=self.clock,
        )
        state.start()  # on the loop: replay commits consumer offsets the handlers also touch
        self.state = self._handlers.state = state
        self._revive = PeriodicService("pop-revive", cfg.pop_revive_interval_seconds, state.revive_due)
        await self._revive.start()

    async def stop(self) -> None:
        revive, self._revive = self._revive, None
        if revive is not None:
            await revive.stop()
        state, self.state = self.state, None
        if self._handlers is not None:
            self._handlers.state = None
        if state is not None:
            state.persist_offsets()

    def drop_state(self) -> None:
        """A slave keeps no revive offsets (a promotion starts from the copied consumer offsets)."""
        drop_revive_offsets(self.config_dir)


__all__ = ["Pop"]
