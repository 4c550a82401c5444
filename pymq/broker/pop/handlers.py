"""POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME: pop consumption (RocketMQ 5's SimpleConsumer).

A pop takes messages from the topic's queues (the broker chooses: round robin from a
moving start, the group's ``%RETRY%<group>_<topic>`` queues first one pop in five, else
after) for the group: per queue it reads from the group's offset, stores a checkpoint in
the revive log (:mod:`pymq.broker.pop`), moves the group's offset past the batch and
answers the stored records with one signed receipt handle each. Several consumers of a
group therefore share queues without a rebalance: the per-queue pop lock is the event
loop itself (read, checkpoint and offset move of one queue run without a suspension
point, so two pops never take the same offsets). Nothing found and ``pollTime`` > 0: the
pop waits on every queue it looked at (:meth:`PullHoldService.hold_many`) and tries again.

Acks and changes of invisible time verify the handle's signature, then its checkpoint's
state (:class:`~pymq.broker.pop.revive.PopState`); a refusal answers
INVALID_RECEIPT_HANDLE whose remark starts with the reason (``forged``, ``mismatch``,
``expired``, ``acked``, ``stale``).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, cast

from pymq.broker.handlers.read_checks import check_read
from pymq.broker.pop.receipt import HandleError, HandleSigner, ReceiptHandle
from pymq.broker.pop.records import CheckPoint
from pymq.broker.pop.revive import PopError, PopState
from pymq.broker.store.results import GetStatus
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.filter import SubscriptionCache
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.record import iter_spans, unpack_record
from pymq.protocol.requests import (
    DEFAULT_PULL_MAX_BYTES,
    MAX_BATCH_ACK,
    POP_INIT_MAX,
    AckMessageRequest,
    BatchAckRequest,
    ChangeInvisibleTimeRequest,
    ChangeInvisibleTimeResponse,
    PopMessageRequest,
    PopMessageResponse,
    pop_retry_topic,
)
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler, HandlerResult, Parked

if TYPE_CHECKING:
    from pymq.broker.long_polling import PullHoldService
    from pymq.broker.offsets import ConsumerOffsetManager
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.subscription_groups import SubscriptionGroupManager
    from pymq.broker.topics import TopicConfigManager
    from pymq.config import BrokerConfig

log = get_logger("broker.pop")

_QUEUE_OFFSET = 9  # index of the queue offset in protocol.record.unpack_record's tuple


class _Popped(NamedTuple):
    buffers: list[memoryview]
    handles: list[str]
    #: (topic, queue, offset) of every queue looked at, for long polling
    waits: list[tuple[str, int, int]]


class PopHandlers:
    def __init__(
        self,
        *,
        store: MessageStore,
        signer: HandleSigner,
        topics: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        pull_hold: PullHoldService,
        stats: BrokerStats,
        config: BrokerConfig,
        address: str,
        before_read: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.store = store
        #: called with (topic, queue, offset) before a queue is read (priority topics refill there)
        self.before_read = before_read
        #: pop's state while this broker is a master (its pop service sets and clears it); None: not served
        self.state: PopState | None = None
        self.signer = signer
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.offsets = offsets
        self.pull_hold = pull_hold
        self.stats = stats
        self.config = config
        self.address = address
        self._rr = 0
        self._full_logged = False
        self._subs = SubscriptionCache()

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.POP_MESSAGE: self._while_served(self.pop),
            RequestCode.ACK_MESSAGE: self._while_served(self.ack),
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self._while_served(self.change_invisible_time),
            RequestCode.BATCH_ACK_MESSAGE: self._while_served(self.batch_ack),
            RequestCode.GET_POP_SECRET: self.pop_secret,
        }

    def pop_secret(self, cmd: Command, channel: Channel) -> Command:
        """GET_POP_SECRET: the handle secret, which this broker's slaves copy (an admin request)."""
        return cmd.response(body=encode_body({"secret": self.signer.secret.hex()}))

    def _while_served(self, handler: Handler) -> Handler:
        """``handler`` while pop is served here; the master's answer otherwise (the role gate answers
        first on a slave or fenced master: this covers the moments a role change is under way)."""

        def served(cmd: Command, channel: Channel) -> HandlerResult:
            if self.state is None:
                return _served_by_master(cmd, channel)
            return handler(cmd, channel)

        return served

    @property
    def _state(self) -> PopState:
        state = self.state
        if state is None:
            raise PopError("store", "pop consumption is served by the master")
        return state

    # --- pop ------------------------------------------------------------------------------------------------

    def pop(self, cmd: Command, channel: Channel) -> HandlerResult:
        h = PopMessageRequest.from_ext(cmd.ext)
        # queue id -1: any of the topic's queues
        checked = check_read(
            cmd, self.topics, self.subscription_groups, self.address, h.topic, h.queue_id, h.consumer_group
        )
        if isinstance(checked, Command):
            return checked
        tc = checked[0]
        try:
            sub = self._subs.get(h.topic, h.exp)
        except ValueError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"header field 'exp': {exc}")
        popped = self._pop(h, tc.readQueueNums, sub.codes or None)
        if popped.buffers:
            return self._answer(cmd, h, popped)
        if h.poll_time > 0:
            return Parked(self._poll(cmd, h, tc.readQueueNums, sub.codes or None, popped.waits))
        return cmd.response(ResponseCode.NO_MESSAGE, "no message to pop")

    def _answer(self, cmd: Command, h: PopMessageRequest, popped: _Popped) -> Command:
        ext = PopMessageResponse.build_ext(
            pop_time=self._state.clock.time_ms(),
            invisible_time=h.invisible_time,
            receipt_handles=" ".join(popped.handles),
        )
        return cmd.response(ResponseCode.SUCCESS, None, ext, popped.buffers)

    async def _poll(
        self,
        cmd: Command,
        h: PopMessageRequest,
        queues: int,
        codes: frozenset[int] | None,
        waits: list[tuple[str, int, int]],
    ) -> Command:
        clock = self.pull_hold.clock
        deadline = clock.monotonic() + min(h.poll_time / 1000, self.config.long_polling_max_seconds)
        while True:
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return cmd.response(ResponseCode.POLLING_TIMEOUT, "no new message within the poll time")
            if not await self.pull_hold.hold_many(waits, remaining) or not self.store.running or self.state is None:
                # timed out, or woken by shutdown (PullHoldService.wake_all answers False)
                return cmd.response(ResponseCode.POLLING_TIMEOUT, "no new message within the poll time")
            tc = self.topics.get(h.topic)
            if tc is None:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] does not exist on {self.address}")
            popped = self._pop(h, tc.readQueueNums, codes)
            if popped.buffers:
                return self._answer(cmd, h, popped)
            waits = popped.waits

    def _queues(self, h: PopMessageRequest, queues: int) -> tuple[list[tuple[str, int]], list[tuple[str, int, int]]]:
        """The queues to pop, in order, and queues only to wait on (a retry topic not created yet)."""
        if h.queue_id >= 0:
            return [(h.topic, h.queue_id)], []
        self._rr += 1
        start = self._rr
        main = [(h.topic, (start + i) % queues) for i in range(queues)]
        retry_name = pop_retry_topic(h.consumer_group, h.topic)
        rtc = self.topics.get(retry_name)
        if rtc is None:  # nothing revived so far: a long poll still wakes on the first revival
            return main, [(retry_name, 0, 0)]
        retry = [(retry_name, q) for q in range(rtc.readQueueNums)]
        # RocketMQ's mix: one pop in five looks at the retry queues first, the others after
        return (retry + main if start % 5 == 0 else main + retry), []

    def _pop(self, h: PopMessageRequest, queues: int, codes: frozenset[int] | None) -> _Popped:
        group = h.consumer_group
        want = h.max_msg_nums
        buffers: list[memoryview] = []
        handles: list[str] = []
        order, waits = self._queues(h, queues)
        state = self._state
        now = state.clock.time_ms()
        for topic, qid in order:
            if want <= 0:
                break
            if state.full:
                if not self._full_logged:
                    self._full_logged = True
                    log.warning("pop_inflight_limit_reached", checkpoints=len(state.open), limit=state.max_inflight)
                break
            offset = self.offsets.query(group, topic, qid)
            if offset < 0:
                # A group's first pop of a queue: where initMode says (retry queues always from their
                # start), committed at once so that what arrives before the first message is not skipped.
                from_max = h.init_mode == POP_INIT_MAX and topic == h.topic
                offset = self.store.max_offset(topic, qid) if from_max else self.store.min_offset(topic, qid)
                self.offsets.commit(group, topic, qid, offset)
            if self.before_read is not None:
                self.before_read(topic, qid, offset)
            res = self.store.get_messages(group, topic, qid, offset, want, DEFAULT_PULL_MAX_BYTES, codes)
            if res.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                offset = res.next_begin_offset
                self.offsets.commit(group, topic, qid, offset)
                res = self.store.get_messages(group, topic, qid, offset, want, DEFAULT_PULL_MAX_BYTES, codes)
            if res.status != GetStatus.FOUND:
                if res.status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
                    offset = res.next_begin_offset
                    self.offsets.commit(group, topic, qid, offset)
                waits.append((topic, qid, offset))  # woken once the queue grows past it
                continue
            queue_offsets = _queue_offsets(res.buffers, offset, res.next_begin_offset, res.message_count)
            ck = CheckPoint(group, topic, qid, queue_offsets, res.next_begin_offset, now, h.invisible_time)
            if not state.add_checkpoint(ck):
                break  # the revive log refused it: pop nothing more (nothing of this queue was taken)
            self.offsets.commit(group, topic, qid, res.next_begin_offset)
            # one signature per checkpoint: its messages' handles differ in index and queue offset only
            part = self.signer.checkpoint_part(group, topic, qid, ck.ck_offset, now, h.invisible_time, ck.revive_qid)
            handles.extend([f"{part}.{i}.{qoff}" for i, qoff in enumerate(queue_offsets)])
            buffers.extend(res.buffers)
            self.stats.record_get(topic, res.message_count, res.total_size)
            want -= len(queue_offsets)
        if buffers:
            self._full_logged = False
        return _Popped(buffers, handles, waits)

    # --- ack and change of invisible time ---------------------------------------------------------------------

    def _handle(self, group: str, topic: str, text: str) -> ReceiptHandle:
        try:
            h = self.signer.decode(text)
        except HandleError as exc:
            raise PopError("forged", str(exc)) from exc
        refusal = self._mismatch(group, topic, h.group, h.topic)
        if refusal is not None:
            raise refusal
        return h

    @staticmethod
    def _mismatch(group: str, topic: str, handle_group: str, handle_topic: str) -> PopError | None:
        """Why a handle issued for ``handle_group``/``handle_topic`` may not be acked as ``group``/``topic``."""
        if handle_group != group:
            return PopError("mismatch", f"handle is for group {handle_group}, not {group}")
        if handle_topic != topic and handle_topic != pop_retry_topic(group, topic):
            return PopError("mismatch", f"handle is for topic {handle_topic}, not {topic}")
        return None

    @staticmethod
    def _refusal(cmd: Command, exc: PopError) -> Command:
        code = ResponseCode.SYSTEM_ERROR if exc.reason == "store" else ResponseCode.INVALID_RECEIPT_HANDLE
        return cmd.response(code, str(exc))

    def ack(self, cmd: Command, channel: Channel) -> Command:
        req = AckMessageRequest.from_ext(cmd.ext)
        try:
            self._state.ack(self._handle(req.consumer_group, req.topic, req.extra_info))
        except PopError as exc:
            return self._refusal(cmd, exc)
        return cmd.response()

    def batch_ack(self, cmd: Command, channel: Channel) -> Command:
        req = BatchAckRequest.from_ext(cmd.ext)
        body = decode_body(cmd.body or b"\x80", "batch ack body")
        texts = body.get("receiptHandles") if isinstance(body, dict) else None
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return cmd.response(
                ResponseCode.INVALID_PARAMETER, "batch ack body needs receiptHandles: a list of strings"
            )
        if len(texts) > MAX_BATCH_ACK:
            return cmd.response(
                ResponseCode.INVALID_PARAMETER, f"at most {MAX_BATCH_ACK} receipt handles per batch ack"
            )
        group, topic = req.consumer_group, req.topic
        groups, errors = self.signer.group_by_checkpoint(texts)
        out: list[PopError | None] = [None] * len(texts)
        for pos, exc in errors.items():
            out[pos] = PopError("forged", str(exc))
        mine = []
        for g in groups:
            refusal = self._mismatch(group, topic, g.group, g.topic)
            if refusal is None:
                mine.append(g)
            else:
                for pos in g.positions:
                    out[pos] = refusal
        self._state.ack_checkpoints(mine, out)
        codes = [ResponseCode.SUCCESS.value] * len(out)
        remarks = [""] * len(out)
        for pos, r in enumerate(out):
            if r is not None:
                codes[pos] = (
                    ResponseCode.SYSTEM_ERROR if r.reason == "store" else ResponseCode.INVALID_RECEIPT_HANDLE
                ).value
                remarks[pos] = str(r)
        return cmd.response(body=encode_body({"codes": codes, "remarks": remarks}))

    def change_invisible_time(self, cmd: Command, channel: Channel) -> Command:
        req = ChangeInvisibleTimeRequest.from_ext(cmd.ext)
        try:
            h = self._handle(req.consumer_group, req.topic, req.extra_info)
            ck = self._state.change_invisible(h, req.invisible_time)
        except PopError as exc:
            return self._refusal(cmd, exc)
        new = ReceiptHandle(
            h.group, h.topic, h.queue_id, h.queue_offset, ck.ck_offset, 0, ck.pop_time, ck.invisible_ms, ck.revive_qid
        )
        ext = ChangeInvisibleTimeResponse.build_ext(
            pop_time=ck.pop_time, invisible_time=ck.invisible_ms, extra_info=self.signer.encode(new)
        )
        return cmd.response(ResponseCode.SUCCESS, None, ext)


def _queue_offsets(buffers: list[memoryview], offset: int, next_offset: int, count: int) -> array[int]:
    """The queue offsets of the records read from ``offset`` up to ``next_offset``: that range when
    every slot gave a record (no tag filtered any out), else each record's own."""
    if next_offset - offset == count:
        return array("q", range(offset, next_offset))
    return array(
        "q", [cast(int, unpack_record(buf, pos)[_QUEUE_OFFSET]) for buf in buffers for pos, _ in iter_spans(buf)]
    )


def _served_by_master(cmd: Command, channel: Channel) -> Command:
    return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "pop consumption is served by the master")
