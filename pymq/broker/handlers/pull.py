"""PULL_MESSAGE with long polling.

The response body is the stored records as they are on disk (a list of buffer slices
written with ``writelines``); ext carries ``nextBeginOffset``, ``minOffset``, ``maxOffset``
and ``suggestWhichBrokerId``. A pull that finds nothing and carries the suspend flag is
held until a message lands in its queue or its suspend time runs out.

Slaves serve pulls like masters (RocketMQ 4.x in effect: its slave sets PULL_RETRY_IMMEDIATELY
without ``slaveReadEnable`` and then overwrites it with the read's own code), so consumers keep
reading while the master is away, but a slave never commits an offset carried by a pull.
``suggestWhichBrokerId`` is RocketMQ's: without ``slave_read_enable`` always the master (0);
with it, the group's ``whichBrokerWhenConsumeSlowly`` (1) when the consumer is far behind (the
unread commitlog bytes past what it just read exceed ``slave_read_lag_bytes``, by default
``access_message_in_memory_max_ratio`` percent of physical memory: the data is probably no
longer in the page cache), else the group's ``brokerId`` (0) — which is how a slave sends a
consumer that caught up back to the master.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, NamedTuple

from pymq.broker.handlers.read_checks import check_read
from pymq.broker.store.results import GetResult, GetStatus
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.filter import SubscriptionCache
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import FLAG_COMMIT_OFFSET, FLAG_SUSPEND, PullMessageRequest, PullMessageResponse
from pymq.protocol.requests_many import WaitQueueArrivalRequest, read_queues
from pymq.protocol.route import MASTER_ID
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler, HandlerResult, Parked

if TYPE_CHECKING:
    from pymq.broker.consumers import ConsumerManager
    from pymq.broker.long_polling import PullHoldService
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.role.state import RoleMachine
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager
    from pymq.config import BrokerConfig

_STATUS_TO_CODE = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
}


class _Read(NamedTuple):
    """What one pull reads (kept for the re-read after a long-polling wait)."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_nums: int
    max_bytes: int
    codes: frozenset[int] | None
    group_config: SubscriptionGroupConfig


def physical_memory_bytes() -> int:
    """This machine's RAM (0 if unknown): the base of ``access_message_in_memory_max_ratio``."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


_PHYSICAL_MEMORY = physical_memory_bytes()


def pull_code(result: GetResult, offset: int) -> int:
    status = result.status
    if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_NOT_FOUND if offset == 0 else ResponseCode.PULL_OFFSET_MOVED
    return _STATUS_TO_CODE[status]


class PullHandlers:
    def __init__(
        self,
        *,
        store: MessageStore,
        topics: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        consumers: ConsumerManager,
        pull_hold: PullHoldService,
        stats: BrokerStats,
        config: BrokerConfig,
        address: str,
        role: RoleMachine,
    ) -> None:
        self.store = store
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.offsets = offsets
        self.consumers = consumers
        self.pull_hold = pull_hold
        self.stats = stats
        #: the live config (slave_read_enable and long_polling_max_seconds change at runtime)
        self.config = config
        self.address = address
        #: only a writable master commits offsets a pull carries (a slave's are the master's)
        self.role = role
        self._subs = SubscriptionCache()

    def table(self) -> dict[int, Handler]:
        return {RequestCode.PULL_MESSAGE: self.pull, RequestCode.WAIT_QUEUE_ARRIVAL: self.wait_arrival}

    def pull(self, cmd: Command, channel: Channel) -> HandlerResult:
        h = PullMessageRequest.from_ext(cmd.ext)
        group = h.consumer_group
        topic = h.topic
        queue_id = h.queue_id
        offset = h.queue_offset
        max_nums = h.max_msg_nums  # 1..1024, checked by from_ext
        sys_flag = h.sys_flag
        suspend_ms = h.suspend_timeout_millis
        # negative queue ids were refused by from_ext
        checked = check_read(cmd, self.topics, self.subscription_groups, self.address, topic, queue_id, group)
        if isinstance(checked, Command):
            return checked
        sg = checked[1]
        client_id = channel.attrs.get("client_id")
        if client_id is not None:
            # Who pulls a queue is who owns it: consumer-progress shows it per queue.
            self.consumers.note_pull_owner(group, topic, queue_id, client_id)
        codes = self._subs.get(topic, h.subscription).codes or None
        if sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0 and self.role.current.writable:
            self.offsets.commit(group, topic, queue_id, h.commit_offset)
        read = _Read(group, topic, queue_id, offset, max_nums, h.max_msg_bytes, codes, sg)
        resp, result = self._read_result(cmd, read)
        if resp.code == ResponseCode.PULL_NOT_FOUND and sys_flag & FLAG_SUSPEND and suspend_ms > 0:
            timeout = min(suspend_ms / 1000, self.config.long_polling_max_seconds)
            return Parked(self._hold(cmd, read, timeout))  # held: no handler slot (issue 36)
        if resp.code == ResponseCode.SUCCESS and self.store.pages_missing(result):
            return self._answer_when_in_memory(resp, result)
        return resp

    async def _answer_when_in_memory(self, resp: Command, result: GetResult) -> Command:
        # A cold backlog: the transport's copy of these slices would wait for the disk on the
        # loop, page by page. Bring the pages in on a worker thread first (store/residency.py).
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.store.prefault, result)
        loop.run_in_executor(None, self.store.prefault_after, result)  # the next MiBs, while this goes out
        return resp

    def _read(self, cmd: Command, r: _Read) -> Command:
        return self._read_result(cmd, r)[0]

    def _read_result(self, cmd: Command, r: _Read) -> tuple[Command, GetResult]:
        result = self.store.get_messages(r.group, r.topic, r.queue_id, r.offset, r.max_nums, r.max_bytes, r.codes)
        suggest = self._suggest(result, r.group_config) if self.config.slave_read_enable else MASTER_ID
        ext = PullMessageResponse.build_ext(
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            suggest_which_broker_id=suggest,
        )
        code = pull_code(result, r.offset)
        if code == ResponseCode.SUCCESS:
            self.stats.record_get(r.topic, result.message_count, result.total_size)
            return cmd.response(code, None, ext, result.buffers), result
        return cmd.response(code, result.status.name, ext), result

    def _suggest(self, result: GetResult, group_config: SubscriptionGroupConfig) -> int:
        """Which broker of the group the consumer should pull from next (``slave_read_enable`` on)."""
        if result.message_count:
            lag = self.store.max_phy_offset - result.max_physical_offset_read
            if lag > self.slave_read_lag_bytes():
                return group_config.whichBrokerWhenConsumeSlowly
        return group_config.brokerId

    def slave_read_lag_bytes(self) -> int:
        """Unread commitlog bytes past which a consumer counts as far behind."""
        cfg = self.config
        if cfg.slave_read_lag_bytes is not None:
            return cfg.slave_read_lag_bytes
        return _PHYSICAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100

    def wait_arrival(self, cmd: Command, channel: Channel) -> HandlerResult:
        """One held wait for messages on many queues (a consumer's idle ones): issue 36.

        Answers at once with the queues that already have messages at their offsets; else
        waits on all of them (one future, one hold entry per queue: ``hold_many``).
        """
        h = WaitQueueArrivalRequest.from_ext(cmd.ext)
        sg = self.subscription_groups.get(h.consumer_group)
        if sg is None:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group {h.consumer_group} does not exist"
            )
        waits = read_queues(cmd.body, with_offset=True)
        ready = self._ready(waits)
        if ready or h.suspend_timeout_millis <= 0:
            return self._ready_answer(cmd, ready)
        timeout = min(h.suspend_timeout_millis / 1000, self.config.long_polling_max_seconds)
        return Parked(self._wait_arrival(cmd, waits, timeout))

    async def _wait_arrival(self, cmd: Command, waits: list[tuple[str, int, int]], timeout: float) -> Command:
        # As _hold: look again a loop step after the first look, before waiting.
        ready = self._ready(waits)
        if not ready:
            await self.pull_hold.hold_many(waits, timeout)
            ready = self._ready(waits)
        return self._ready_answer(cmd, ready)

    def _ready(self, waits: list[tuple[str, int, int]]) -> list[int]:
        """Indexes of ``waits`` with a message at or past their offset (or that no pull could wait on)."""
        topics, store = self.topics, self.store
        out = []
        for i, (topic, queue_id, offset) in enumerate(waits):
            tc = topics.get(topic)
            if tc is None or queue_id >= tc.readQueueNums or store.max_offset(topic, queue_id) > offset:
                out.append(i)
        return out

    @staticmethod
    def _ready_answer(cmd: Command, ready: list[int]) -> Command:
        return cmd.response(body=encode_body({"ready": ready}))

    async def _hold(self, cmd: Command, r: _Read, timeout: float) -> Command:
        # This runs a loop step after the read: a message that arrived in between woke nobody (the
        # hold did not exist yet), so look again before waiting, or it would wait for the timeout.
        if self.store.max_offset(r.topic, r.queue_id) <= r.offset:
            await self.pull_hold.hold(r.topic, r.queue_id, r.offset, timeout)
        return self._read(cmd, r)
