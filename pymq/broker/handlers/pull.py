"""PULL_MESSAGE with long polling.

The response body is the stored records as they are on disk (a list of buffer slices
written with ``writelines``); ext carries ``nextBeginOffset``, ``minOffset``, ``maxOffset``
and ``suggestWhichBrokerId``. A pull that finds nothing and carries the suspend flag is
held until a message lands in its queue or its suspend time runs out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from pymq.broker.store.results import GetResult, GetStatus
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.filter import Subscription
from pymq.protocol.frame import Command
from pymq.protocol.headers import get_int, get_str
from pymq.protocol.requests import DEFAULT_PULL_MAX_BYTES, FLAG_COMMIT_OFFSET, FLAG_SUSPEND
from pymq.protocol.route import perm_readable
from pymq.transport.dispatch import Handler, HandlerResult

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp
    from pymq.transport.connection import Connection

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


def pull_code(result: GetResult, offset: int) -> int:
    status = result.status
    if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_NOT_FOUND if offset == 0 else ResponseCode.PULL_OFFSET_MOVED
    return _STATUS_TO_CODE[status]


class PullHandlers:
    def __init__(self, app: BrokerApp) -> None:
        self.app = app
        self._subs: dict[tuple[str, str], Subscription] = {}

    def table(self) -> dict[int, Handler]:
        return {RequestCode.PULL_MESSAGE: self.pull}

    def _tag_codes(self, topic: str, expression: str | None) -> frozenset[int] | None:
        key = (topic, expression or "*")
        sub = self._subs.get(key)
        if sub is None:
            if len(self._subs) > 10_000:
                self._subs.clear()
            sub = self._subs[key] = Subscription.parse(topic, expression)
        return sub.codes or None

    def pull(self, cmd: Command, conn: Connection) -> HandlerResult:
        app = self.app
        ext = cmd.ext
        group = get_str(ext, "consumerGroup")
        topic = get_str(ext, "topic")
        queue_id = get_int(ext, "queueId")
        offset = get_int(ext, "queueOffset")
        max_nums = max(1, min(get_int(ext, "maxMsgNums", 32), 1024))
        max_bytes = get_int(ext, "maxBytes", DEFAULT_PULL_MAX_BYTES)
        sys_flag = get_int(ext, "sysFlag", 0)
        suspend_ms = get_int(ext, "suspendTimeoutMillis", 0)
        tc = app.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] does not exist on {app.address}")
        if not perm_readable(tc.perm):
            return cmd.response(ResponseCode.NO_PERMISSION, f"topic[{topic}] is not readable on {app.address}")
        if queue_id < 0 or queue_id >= tc.readQueueNums:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId {queue_id} out of range (topic {topic} has {tc.readQueueNums})",
            )
        sg = app.subscription_groups.get(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group {group} does not exist")
        if not sg.consumeEnable:
            return cmd.response(ResponseCode.NO_PERMISSION, f"consumer group {group} is not allowed to consume")
        if app.is_slave and not app.config.slave_read_enable:
            return cmd.response(
                ResponseCode.PULL_RETRY_IMMEDIATELY,
                "slave does not serve reads",
                {"nextBeginOffset": offset, "minOffset": 0, "maxOffset": 0, "suggestWhichBrokerId": 0},
            )
        client_id = conn.attrs.get("client_id")
        if client_id is not None:
            # Who pulls a queue is who owns it: consumer-progress shows it per queue.
            app.pull_owners[(group, topic, queue_id)] = client_id
        codes = self._tag_codes(topic, ext.get("subscription"))
        if sys_flag & FLAG_COMMIT_OFFSET and not app.is_slave:
            commit = get_int(ext, "commitOffset", -1)
            if commit >= 0:
                app.offsets.commit(group, topic, queue_id, commit)
        read = _Read(group, topic, queue_id, offset, max_nums, max_bytes, codes)
        resp = self._read(cmd, read)
        if resp.code == ResponseCode.PULL_NOT_FOUND and sys_flag & FLAG_SUSPEND and suspend_ms > 0:
            timeout = min(suspend_ms / 1000, app.config.long_polling_max_seconds)
            return self._hold(cmd, read, timeout)
        return resp

    def _read(self, cmd: Command, r: _Read) -> Command:
        result = self.app.store.get_messages(r.group, r.topic, r.queue_id, r.offset, r.max_nums, r.max_bytes, r.codes)
        ext = {
            "nextBeginOffset": result.next_begin_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
            "suggestWhichBrokerId": 0,
        }
        code = pull_code(result, r.offset)
        if code == ResponseCode.SUCCESS:
            self.app.stats.record_get(r.topic, result.message_count, result.total_size)
            return cmd.response(code, None, ext, result.buffers)
        return cmd.response(code, result.status.name, ext)

    async def _hold(self, cmd: Command, r: _Read, timeout: float) -> Command:
        await self.app.pull_hold.hold(r.topic, r.queue_id, r.offset, timeout)
        return self._read(cmd, r)
