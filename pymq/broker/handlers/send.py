"""SEND_MESSAGE and SEND_BATCH_MESSAGE: validate, store, answer with where the messages went.

The request body is one or more encoded records (see :mod:`pymq.protocol.record`); they
are stored as they are. Response ext: ``queueId`` (the queue asked for, even when a put hook stored
the records elsewhere: a priority level, a delay level, a half message), ``queueOffset`` (of the first message),
``commitLogOffsets`` (one per message) and, if some messages were refused, ``statuses``.
With SYNC_FLUSH the answer waits for a disk sync covering the messages (group commit).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING

from pymq.broker.ha.acks import REPLICATED
from pymq.broker.put_path import PUT_STATUS_TO_CODE, PutMessages
from pymq.broker.retry.policy import dead_letter_if_exhausted
from pymq.broker.store.results import PutResults, PutStatus, StoredRun
from pymq.broker.sync_flush.group_commit import GroupCommit, on_the_loop
from pymq.broker.sync_flush.loop_sync import LoopSync
from pymq.broker.system_topics import SCHEDULE_TOPIC
from pymq.broker.timer.hook import TIMER_TOPIC
from pymq.broker.topics import validate_topic_name
from pymq.broker.transaction.hook import TRANSACTION_TOPICS
from pymq.config import FlushDiskType
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import FLAG_RESPONSE, Buffer, Command
from pymq.protocol.requests import RETRY_PREFIX, SendMessageRequest, SendMessageResponse
from pymq.protocol.route import PERM_WRITE, perm_writable
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Deferred, Handler, HandlerResult

if TYPE_CHECKING:
    from pymq.broker.role.state import RoleMachine
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager
    from pymq.config import BrokerConfig


#: the answer to a send whose body holds no record at all
EMPTY_BODY_REMARK = "empty message body: a send must carry at least one encoded record"

#: topics only the broker writes (as RocketMQ's NOT_ALLOWED_SEND_TOPIC_SET): a record sent there
#: names its own REAL_TOPIC, and would be committed or delivered past the sender's permissions
NOT_ALLOWED_SEND_TOPICS = TRANSACTION_TOPICS | {TIMER_TOPIC, SCHEDULE_TOPIC}

#: SYNC_MASTER: a future for "enough slaves hold everything below this offset" (resolved with
#: pymq.broker.ha.acks.REPLICATED or TIMED_OUT), or None when no slave is in sync
#: ``wait_replicated(end, waiter)``: None (no slave in sync), REPLICATED, or PENDING (``waiter`` learns later)
WaitReplicated = Callable[[int, "_ReplicaWait"], "int | None"]
_PUT_OK = PutStatus.PUT_OK
_SUCCESS = int(ResponseCode.SUCCESS)
_QUEUE_ID = SendMessageResponse.WIRE["queue_id"]
_QUEUE_OFFSET = SendMessageResponse.WIRE["queue_offset"]
_COMMIT_LOG_OFFSETS = SendMessageResponse.WIRE["commit_log_offsets"]
_STATUS = attrgetter("status")
_PHYSICAL_OFFSET = attrgetter("physical_offset")


class SendHandlers:
    def __init__(
        self,
        *,
        store: MessageStore,
        put_messages: PutMessages,
        topics: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        stats: BrokerStats,
        config: BrokerConfig,
        address: str,
        role: RoleMachine,
        wait_replicated: WaitReplicated | None = None,
        loop_sync: LoopSync | None = None,
        in_sync_replicas: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        #: SYNC_MASTER's min_in_sync_replicas: the replicas in sync now (the master counted)
        self.in_sync_replicas = in_sync_replicas
        self.min_in_sync = config.min_in_sync_replicas
        #: SYNC_MASTER's seam (the HA master service); the role is read per send (it can change)
        self.wait_replicated = wait_replicated
        self.role = role
        #: every store write goes through here (the broker's put path, not the store directly)
        self.put_messages = put_messages
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.stats = stats
        self.config = config
        self.address = address
        self.sync_flush = config.store.flush_disk_type == FlushDiskType.SYNC_FLUSH
        self.flush_timeout = config.store.sync_flush_timeout_ms / 1000
        #: SYNC_FLUSH: answers sends once a shared disk sync covers them (synced by the store's C
        #: syncer through ``loop_sync`` when there is one, else by its flusher thread)
        self.group_commit = (
            GroupCommit(
                loop_sync.request if loop_sync is not None else on_the_loop(store.request_flush),
                lambda: store.flushed_offset,
                self.flush_timeout,
                linger=config.store.sync_flush_linger_us / 1_000_000,
            )
            if self.sync_flush
            else None
        )

    def table(self) -> dict[int, Handler]:
        return {RequestCode.SEND_MESSAGE: self.send, RequestCode.SEND_BATCH_MESSAGE: self.send}

    def check_topic(self, cmd: Command, header: SendMessageRequest | None = None) -> tuple[str, int] | Command:
        """The (topic, queue id) to store into, or an error response."""
        if header is None:
            header = SendMessageRequest.from_ext(cmd.ext)
        topic = header.topic
        queue_id = header.queue_id
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return cmd.response(ResponseCode.NO_PERMISSION, f"sending message to topic[{topic}] is forbidden")
        tc = self.topics.get(topic)
        if tc is None:
            validate_topic_name(topic, self.config.store.max_topic_length)
            tc = self.topics.auto_create_for_send(topic)
            if tc is None:
                return cmd.response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] does not exist on {self.address}, create it first",
                )
        if not perm_writable(tc.perm):
            return cmd.response(ResponseCode.NO_PERMISSION, f"topic[{topic}] is not writable on {self.address}")
        if queue_id < 0:
            queue_id = random.randrange(tc.writeQueueNums)
        elif queue_id >= tc.writeQueueNums:
            return cmd.response(
                ResponseCode.INVALID_PARAMETER,
                f"header field 'queueId' out of range: {queue_id}, topic {topic} has write queues "
                f"0..{tc.writeQueueNums - 1}",
            )
        return topic, queue_id

    def send(self, cmd: Command, channel: Channel) -> HandlerResult:
        header = SendMessageRequest.from_ext(cmd.ext)
        topic = header.topic
        queue_id = header.queue_id
        # The usual send passes every check of check_topic at once: a writable topic this broker
        # has, a queue in range, not a broker-only topic. Anything else gets the full check
        # (auto-creation, a random queue, the error answers), in its order.
        tc = self.topics.get(topic)
        if (
            tc is None
            or not tc.perm & PERM_WRITE
            or not 0 <= queue_id < tc.writeQueueNums
            or topic in NOT_ALLOWED_SEND_TOPICS
        ):
            checked = self.check_topic(cmd, header)
            if isinstance(checked, Command):
                return checked
            topic, queue_id = checked
        body: Buffer = cmd.body  # type: ignore[assignment]  # a received request's body is one buffer
        if not len(body):
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, EMPTY_BODY_REMARK)
        if self.min_in_sync > 1 and self.role.sync_master:
            refused = self._too_few_in_sync(cmd)
            if refused is not None:
                return refused
        if topic.startswith(RETRY_PREFIX):
            topic, queue_id, body = dead_letter_if_exhausted(
                topic, queue_id, body, self.subscription_groups, self.topics
            )
        results = self.put_messages(topic, queue_id, body)
        if len(results) == 1 and results[0].status is _PUT_OK:
            # A single send stored: build_response's answer, built here (its ext's wire names
            # looked up once, not a build_ext call per send).
            r = results[0]
            resp = Command(
                _SUCCESS,
                cmd.opaque,
                FLAG_RESPONSE,
                None,
                # the queue asked for: a put hook may store elsewhere (a priority topic's level queue,
                # a delay level, a half message), but the sender's queue is the topic's own
                {_QUEUE_ID: queue_id, _QUEUE_OFFSET: r.queue_offset, _COMMIT_LOG_OFFSETS: [r.physical_offset]},
            )
            self.stats.record_put_one(topic, r.size)
        else:
            resp = self.build_response(cmd, queue_id, results)
            self.stats.record_put(topic, results)
        sync_master = self.role.sync_master
        if (self.sync_flush or sync_master) and resp.code == ResponseCode.SUCCESS and results:
            if len(results) == 1:
                first = results[0]
                end = first.physical_offset + first.size
            else:
                end = max(r.physical_offset + r.size for r in results)
            if sync_master and self.wait_replicated is not None:
                return self._await_replicas(resp, end)
            if self.group_commit is not None:
                return self.group_commit.wait(resp, end)
        return resp

    def _too_few_in_sync(self, cmd: Command) -> Command | None:
        """Below min_in_sync_replicas a SYNC master stores nothing (RocketMQ 5's IN_SYNC_REPLICAS_NOT_ENOUGH)."""
        have = self.in_sync_replicas() if self.in_sync_replicas is not None else 1
        if have >= self.min_in_sync:
            return None
        return cmd.response(
            ResponseCode.SYSTEM_ERROR,
            f"in-sync replicas not enough: {have} in sync (the master counted), min_in_sync_replicas "
            f"{self.min_in_sync}; nothing was stored",
        )

    @staticmethod
    def build_response(cmd: Command, queue_id: int, results: PutResults) -> Command:
        if type(results) is StoredRun:  # a batch stored whole: its columns, no object per record
            return cmd.response(
                ResponseCode.SUCCESS,
                ext=SendMessageResponse.build_ext(
                    queue_id=queue_id,
                    queue_offset=results.first_queue_offset,
                    commit_log_offsets=results.physical_offsets,
                ),
            )
        if not results:  # nothing was stored, so nothing succeeded (never "SUCCESS at offset -1")
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, EMPTY_BODY_REMARK)
        ok = PutStatus.PUT_OK
        statuses = list(map(_STATUS, results))
        first_fail = None if statuses.count(ok) == len(statuses) else next(r for r in results if r.status != ok)
        ext = SendMessageResponse.build_ext(
            queue_id=queue_id,
            queue_offset=results[0].queue_offset
            if first_fail is None
            else next((r.queue_offset for r in results if r.status == ok), -1),
            commit_log_offsets=list(map(_PHYSICAL_OFFSET, results)),
            statuses=None if first_fail is None else [int(s) for s in statuses],
        )
        if first_fail is None:
            return cmd.response(ResponseCode.SUCCESS, ext=ext)
        stored = sum(1 for r in results if r.status == ok)
        remark = f"{stored}/{len(results)} stored; {first_fail.status.name}: {first_fail.reason}"
        return cmd.response(PUT_STATUS_TO_CODE.get(first_fail.status, ResponseCode.SYSTEM_ERROR), remark, ext)

    def _await_replicas(self, resp: Command, end: int) -> Command | Deferred:
        """SYNC_MASTER: answer once enough slaves hold the records (after the disk flush under SYNC_FLUSH).

        The message is stored whatever happens: a slow slave answers FLUSH_SLAVE_TIMEOUT,
        no slave in sync SLAVE_NOT_AVAILABLE (as RocketMQ does). The answer is a
        :class:`Deferred` that the slave's ACK gives (the dispatcher writes it from that call:
        no future, task or loop pass per send).
        """
        out = _ReplicaWait(resp, self.config.slave_ack_timeout_ms)
        if self.group_commit is not None:
            self.group_commit.wait(resp, end).then(partial(self._after_flush, end, out))
            return out
        return self._replicated(resp, end, out)

    def _after_flush(self, end: int, out: _ReplicaWait, resp: Command | None, error: BaseException | None) -> None:
        if out.done():
            return
        if error is not None:
            if isinstance(error, asyncio.CancelledError):
                out.cancel()
            else:
                out.set_exception(error)
            return
        assert resp is not None
        if resp.code != ResponseCode.SUCCESS:
            out.set_result(resp)
            return
        out.resp = resp
        answer = self._replicated(resp, end, out)
        if isinstance(answer, Command):  # (else the replication gives it later)
            out.set_result(answer)

    def _replicated(self, resp: Command, end: int, out: _ReplicaWait) -> Command | Deferred:
        """``resp`` at once (no slave in sync, or already replicated), else ``out`` (given later)."""
        assert self.wait_replicated is not None
        outcome = self.wait_replicated(end, out)
        if outcome is None:
            resp.code = ResponseCode.SLAVE_NOT_AVAILABLE
            resp.remark = "stored on the master, but no slave is in sync"
            return resp
        if outcome == REPLICATED:
            return resp
        return out


class _ReplicaWait(Deferred):
    """A SYNC_MASTER send's answer, waiting for its slaves: the replication's waiter gives it
    (``set_result(REPLICATED)``: the answer as stored; else FLUSH_SLAVE_TIMEOUT)."""

    __slots__ = ("resp", "timeout_ms")

    def __init__(self, resp: Command, timeout_ms: int) -> None:
        # (the Deferred's fields set here: one call per send, not two)
        self._done = False
        self._answer = self._error = self._then = None
        self.resp = resp
        self.timeout_ms = timeout_ms

    def set_result(self, outcome: int | Command | None, /) -> None:
        """An outcome of the replication (REPLICATED, TIMED_OUT) or, after a failed flush, the answer."""
        if outcome.__class__ is not int:
            self._give(outcome, None)  # type: ignore[arg-type]
            return
        resp = self.resp
        if outcome != REPLICATED:
            resp.code = ResponseCode.FLUSH_SLAVE_TIMEOUT
            resp.remark = f"stored on the master, but no slave acknowledged it within {self.timeout_ms} ms"
        self._give(resp, None)
