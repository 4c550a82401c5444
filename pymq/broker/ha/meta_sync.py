"""A slave's copy of its master's metadata, every ``slave_sync_interval_seconds`` (10 s).

Topic configs, consumer offsets, delay (schedule) offsets and subscription groups come from
the master's normal port with the admin requests RocketMQ's SlaveSynchronize uses
(GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and replace the slave's own tables, which are persisted
like a master's, so a slave promoted to master starts with them (its schedule service reads
the copied ``delayOffset.json``).

What else a promoted slave needs so as not to deliver again what its master delivered
(issue 16 failover) comes the same way: pop revive offsets, priority refill offsets and
transaction positions are consumer offsets of system groups (as RocketMQ keeps them), so
the consumer-offset copy carries them; the timer service's delivery state comes with
GET_TIMER_CHECK_POINT (60, as RocketMQ's SlaveSynchronize.syncTimerCheckPoint) about every
second (``TIMER_SYNC_INTERVAL``, at-least-once window of a failover) into
``timer/masterTimerCheckpoint.json`` (see :mod:`pymq.broker.timer.takeover`).

The pop receipt handle secret comes with each copy too (GET_POP_SECRET, issue 32): the slave
signs and verifies with its master's, so a handle the master issued is accepted by the slave
once it is promoted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymq.broker.store.config_files import write_json_atomic
from pymq.errors import PymqError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body
from pymq.tasks import cancel_and_wait

if TYPE_CHECKING:
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager
    from pymq.transport.client import RpcClient

log = get_logger("broker.ha.meta_sync")

#: seconds between two copies of the master's timer delivery state
TIMER_SYNC_INTERVAL = 1.0


class SlaveMetaSync:
    def __init__(
        self,
        *,
        rpc: RpcClient,
        master_addr: Callable[[], str | None],
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        subscription_groups: SubscriptionGroupManager,
        delay_offsets_path: Path,
        interval: Callable[[], float],
        timer_checkpoint_path: Path | None = None,
        pop_secret: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.rpc = rpc
        self.master_addr = master_addr
        self.topics = topics
        self.offsets = offsets
        self.subscription_groups = subscription_groups
        self.delay_offsets_path = delay_offsets_path
        self.interval = interval
        self.timer_checkpoint_path = timer_checkpoint_path
        #: takes the master's pop receipt handle secret (True when it was another one)
        self.pop_secret = pop_secret
        self._pop_secret_failing = False
        #: time.time() of the last copy of the master's timer state (0: none yet)
        self.last_timer_sync = 0.0
        self._timer_task: asyncio.Task[None] | None = None
        #: time.time() of the last complete copy (0: none yet)
        self.last_sync = 0.0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        self._task.set_name("broker-slave-meta-sync")
        if self.timer_checkpoint_path is not None:
            self._timer_task = asyncio.ensure_future(self._run_timer())
            self._timer_task.set_name("broker-slave-timer-sync")

    async def stop(self) -> None:
        for task in (self._task, self._timer_task):
            await cancel_and_wait(task)
        self._task = self._timer_task = None

    async def _run_timer(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(TIMER_SYNC_INTERVAL)
            addr = self.master_addr()
            if not addr:
                continue
            try:
                await self.sync_timer(addr)
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:  # once per failing stretch: a master without timers answers an error each time
                    log.info("slave_timer_sync_failed", master=addr, reason=str(exc) or type(exc).__name__)
                failing = True

    async def sync_timer(self, addr: str) -> None:
        """Copy the master's timer delivery state (GET_TIMER_CHECK_POINT) next to the timer files."""
        path = self.timer_checkpoint_path
        if path is None:
            return
        state = await self._get(addr, RequestCode.GET_TIMER_CHECK_POINT)
        if int(state.get("cursorMs", -1)) < 0:
            return  # the master's service has not started yet: nothing to take over from
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(write_json_atomic, path, state)
        self.last_timer_sync = asyncio.get_running_loop().time()

    async def _run(self) -> None:
        while True:
            delay = self.interval()
            try:
                if not await self.sync_once():
                    delay = min(delay, 1.0)  # no master known yet: ask again soon
            except asyncio.CancelledError:
                raise
            except PymqError as exc:
                log.warning("slave_meta_sync_failed", master=self.master_addr(), reason=str(exc))
            except Exception:
                log.exception("slave_meta_sync_failed", master=self.master_addr())
            await asyncio.sleep(delay)

    async def _get(self, addr: str, code: int) -> dict[str, Any]:
        resp = await self.rpc.invoke_ok(addr, Command.request(code), timeout=5.0)
        body = decode_body(resp.body, "master metadata")
        return body if isinstance(body, dict) else {}

    async def sync_pop_secret(self, addr: str) -> None:
        """Take the master's pop receipt handle secret (a master without GET_POP_SECRET: logged once)."""
        if self.pop_secret is None:
            return
        try:
            secret = bytes.fromhex(str((await self._get(addr, RequestCode.GET_POP_SECRET)).get("secret", "")))
            changed = self.pop_secret(secret)
        except (PymqError, ValueError) as exc:
            if not self._pop_secret_failing:
                log.warning("slave_pop_secret_sync_failed", master=addr, reason=str(exc) or type(exc).__name__)
            self._pop_secret_failing = True
            return
        self._pop_secret_failing = False
        if changed:
            log.info("slave_took_master_pop_secret", master=addr)

    async def sync_once(self) -> bool:
        """Copy everything once; False if no master is known."""
        addr = self.master_addr()
        if not addr:
            return False
        topics = await self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        self.topics.replace_all(topics.get("topicConfigTable") or {}, topics.get("dataVersion"))
        offsets = (await self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)).get("offsetTable") or {}
        self.offsets.table = {k: {int(q): int(o) for q, o in v.items()} for k, v in offsets.items()}
        self.offsets.persist()
        delay = (await self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET)).get("offsetTable") or {}
        write_json_atomic(self.delay_offsets_path, {"offsetTable": {str(k): int(v) for k, v in delay.items()}})
        groups = (await self._get(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).get("subscriptionGroupTable")
        self.subscription_groups.replace_all(groups or {})
        if self.timer_checkpoint_path is not None:
            with contextlib.suppress(PymqError):  # a master without timers
                await self.sync_timer(addr)
        await self.sync_pop_secret(addr)
        self.last_sync = asyncio.get_running_loop().time()
        return True
