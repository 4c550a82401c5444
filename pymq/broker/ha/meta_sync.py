"""A slave's copy of its master's metadata, every ``slave_sync_interval_seconds`` (10 s).

Topic configs, consumer offsets, delay (schedule) offsets and subscription groups come from
the master's normal port with the admin requests RocketMQ's SlaveSynchronize uses
(GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and replace the slave's own tables, which are persisted
like a master's, so a slave promoted to master starts with them (its schedule service reads
the copied ``delayOffset.json``).
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

if TYPE_CHECKING:
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager
    from pymq.transport.client import RpcClient

log = get_logger("broker.ha.meta_sync")


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
    ) -> None:
        self.rpc = rpc
        self.master_addr = master_addr
        self.topics = topics
        self.offsets = offsets
        self.subscription_groups = subscription_groups
        self.delay_offsets_path = delay_offsets_path
        self.interval = interval
        #: time.time() of the last complete copy (0: none yet)
        self.last_sync = 0.0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        self._task.set_name("broker-slave-meta-sync")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

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
        self.last_sync = asyncio.get_running_loop().time()
        return True
