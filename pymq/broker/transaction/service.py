"""Transactional messages on the broker: commit, rollback, the op log and the pending half messages.

RocketMQ's TransactionalMessageServiceImpl, in pymq's seams. Half messages are stored in
``RMQ_SYS_TRANS_HALF_TOPIC`` by the put hook (:mod:`pymq.broker.transaction.hook`). An
outcome is an *op* record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` whose body is the half
message's *origin* (its first offset in the half queue):

* **commit** (END_TRANSACTION, or a check-back answer): the half message is re-stored on
  its real topic and queue with its own properties (keys, tags, user properties) minus
  ``TRAN_MSG``/``REAL_TOPIC``/``REAL_QID``, the "commit" transaction type and the half's
  commitlog offset as ``prepared_tx_offset``; the final message and its op record are
  stored in one atomic store call, so a crash never leaves a delivered message without
  its op (which would be committed again) nor an op without the message;
* **rollback**: only the op record.

A message whose outcome is still unknown is *checked back* by
:class:`~pymq.broker.transaction.check.TransactionCheckService`: as RocketMQ does, the
half message is first stored again at the end of the half queue (``put back``, with
``TRANSACTION_CHECK_TIMES`` + 1 and ``TRAN_PREPARED_QUEUE_OFFSET`` naming the origin), so
the queue's scan position can move on, then a producer of its group is asked. Every copy
of a message shares its origin, so an outcome for any copy resolves them all and a late
duplicate END_TRANSACTION never commits twice.

State: the half messages still waiting (``live``: the latest copy per origin), kept up to
date incrementally: each :meth:`refresh` reads the op records stored since the last one and,
of the half records stored since, only those not resolved already (a first copy whose offset
is a resolved origin is skipped unread), so a check round costs what waits, never a rescan
of resolved messages (20,000 half messages, 1 % waiting: 123 ms before, 3.6 ms).
Persisted in ``config/transactionOffset.json``: ``halfOffset`` (the oldest waiting copy:
everything before it is resolved or superseded), ``opOffset`` and ``horizon``. At start
the op log is replayed from ``opOffset`` and the half queue read from ``halfOffset``.
The op position only moves past op records whose origin is below every waiting message
(the *horizon*): an origin below the horizon is resolved, whatever the op set remembers.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymq.broker.store.config_files import read_json, write_json_atomic
from pymq.broker.store.results import GetStatus, PutResult, PutStatus
from pymq.broker.transaction.hook import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC, ORIGIN_OFFSET
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.errors import MessageDecodeError
from pymq.logs import get_logger
from pymq.protocol.message import Prop
from pymq.protocol.record import (
    RecordFields,
    decode_properties,
    encode_properties,
    encode_record,
    iter_spans,
    parse_record,
    reencode,
    unpack_record,
)
from pymq.protocol.record_edit import last_property, moved_record, property_keys, strip_properties
from pymq.protocol.requests import EndTransactionRequest
from pymq.protocol.transaction import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    PGROUP,
    TRAN_MSG,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)

if TYPE_CHECKING:
    from pymq.broker.stats import BrokerStats
    from pymq.broker.store import MessageStore
    from pymq.broker.topics import TopicConfigManager

log = get_logger("broker.transactions")

#: the internal reader's group name (RocketMQ's CID_SYS_RMQ_TRANS)
SYSTEM_GROUP = "CID_SYS_RMQ_TRANS"
#: the op records' tag (RocketMQ's REMOVETAG)
OP_TAG = "d"
_OP_PROPS = encode_properties({Prop.TAGS: OP_TAG})
_HALF_TOPIC_B = HALF_TOPIC.encode()
_ORIGIN_KEY, _PGROUP_KEY, _REAL_TOPIC_KEY, _REAL_QID_KEY = property_keys(
    ORIGIN_OFFSET, PGROUP, Prop.REAL_TOPIC, Prop.REAL_QID
)
#: what a committed message does not keep of its half's properties
_NOT_COMMITTED = property_keys(Prop.REAL_TOPIC, Prop.REAL_QID, TRAN_MSG, ORIGIN_OFFSET, TRANSACTION_CHECK_TIMES)
_READ_BATCH = 256


#: the service's positions (halfOffset, opOffset): a master's own, stale for a slave
STATE_FILE = "transactionOffset.json"


@dataclass(slots=True)
class FoundHalf:
    """The half message an END_TRANSACTION names (:meth:`TransactionalMessageService.find_half`)."""

    #: its stored record (a view of the commitlog: read what is needed, do not keep it)
    record: memoryview
    queue_offset: int
    #: its encoded properties
    properties: bytes
    #: the topic it is committed to ("" if it names none)
    real_topic: str


@dataclass(slots=True)
class HalfEntry:
    """One stored copy of a half message, as the scan reads it."""

    queue_offset: int
    commitlog_offset: int
    store_timestamp: int
    origin: int
    group: str
    check_times: int
    #: ms before the first check-back (CHECK_IMMUNITY_TIME_IN_SECONDS), 0: the broker's timeout
    immunity_ms: int
    props: dict[str, str]

    def summary(self) -> dict[str, Any]:
        p = self.props
        return {
            "producerGroup": self.group,
            "topic": p.get(Prop.REAL_TOPIC, ""),
            "queueId": int(p.get(Prop.REAL_QID, "0") or 0),
            "msgId": p.get(Prop.UNIQ_KEY, ""),
            "keys": p.get(Prop.KEYS, ""),
            "tags": p.get(Prop.TAGS, ""),
            "halfOffset": self.queue_offset,
            "originOffset": self.origin,
            "commitLogOffset": self.commitlog_offset,
            "checkTimes": self.check_times,
            "storeTimestamp": self.store_timestamp,
        }


class TransactionalMessageService:
    """Commit, rollback, the op log and the pending half messages of one broker."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        stats: BrokerStats,
        config_dir: Path,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.topics = topics
        self.stats = stats
        self.clock = clock
        self.path = config_dir / STATE_FILE
        self.half_offset = 0
        self.op_offset = 0
        #: origins with an op record (from ``op_offset`` on)
        self.resolved: set[int] = set()
        #: (op queue offset, origin) of the op records from ``op_offset`` on, in order
        self._ops: deque[tuple[int, int]] = deque()
        #: origins below it are resolved (set by each refresh)
        self.horizon = 0
        #: origin -> the latest stored copy of each half message still waiting for an outcome
        self.live: dict[int, HalfEntry] = {}
        #: the half queue offset after the last record read
        self._half_next = 0
        #: the op queue offset after the last op record known here
        self._op_next = 0
        self._saved: tuple[int, int, int] = (-1, -1, -1)
        # counters (metrics)
        self.commits = 0
        self.rollbacks = 0
        self.checks = 0
        self.discarded = 0

    # --- state ------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the positions, replay the op log and compute the horizon (before serving)."""
        data = read_json(self.path) or {}
        # Never past the queues' ends (a store that lost its tail in an OS crash): nothing may be skipped.
        self.half_offset = min(int(data.get("halfOffset", 0)), self.store.max_offset(HALF_TOPIC, 0))
        self.op_offset = min(int(data.get("opOffset", 0)), self.store.max_offset(OP_TOPIC, 0))
        # Origins below it are resolved even if their op records were passed (pymq's own field).
        self.horizon = min(int(data.get("horizon", 0)), self.half_offset)
        self._saved = (self.half_offset, self.op_offset, self.horizon)
        self._op_next = self.op_offset
        self._half_next = self.half_offset
        self.refresh()

    def _catch_up_ops(self) -> None:
        """Read op records stored since the last one known (at start; on a slave, what replication brought)."""
        for r in self._records(OP_TOPIC, self._op_next):
            self._op_next = r.queue_offset + 1
            try:
                origin = int(bytes(r.body))
            except ValueError:
                continue
            self.resolved.add(origin)
            self._ops.append((r.queue_offset, origin))

    def state(self) -> dict[str, int]:
        return {"halfOffset": self.half_offset, "opOffset": self.op_offset, "horizon": self.horizon}

    def persist_if_changed(self) -> None:
        now = (self.half_offset, self.op_offset, self.horizon)
        if now != self._saved:
            write_json_atomic(self.path, self.state())
            self._saved = now

    def is_resolved(self, origin: int) -> bool:
        return origin < self.horizon or origin in self.resolved

    # --- reading the half and op queues ---------------------------------------------------------------

    def _records(self, topic: str, offset: int, until: int | None = None) -> list[RecordFields]:
        """The records of ``topic`` (queue 0) from queue offset ``offset`` on (below ``until``, if given)."""
        store = self.store
        out: list[RecordFields] = []
        while until is None or offset < until:
            count = _READ_BATCH if until is None else min(_READ_BATCH, until - offset)
            res = store.get_messages(SYSTEM_GROUP, topic, 0, offset, count)
            if res.status == GetStatus.OFFSET_TOO_SMALL:
                offset = res.next_begin_offset  # cleaned up: go on from the oldest kept
                continue
            if res.status != GetStatus.FOUND:
                return out
            for buf in res.buffers:
                for pos, _size in iter_spans(buf):
                    try:
                        out.append(parse_record(buf, pos))
                    except MessageDecodeError:
                        log.warning("transaction_record_unreadable", topic=topic, offset=offset)
            if res.next_begin_offset <= offset:
                return out
            offset = res.next_begin_offset
        return out

    def _unresolved_runs(self, start: int, end: int) -> list[tuple[int, int]]:
        """The runs ``[first, last)`` of half-queue offsets in ``[start, end)`` that may hold a waiting copy.

        An offset that is itself a resolved origin holds that message's first copy (an origin is
        the offset of a first copy, and a put-back copy's own offset is no message's origin): it is
        skipped unread. Under steady load nearly every half message is resolved before a check
        round reads it, so a round reads what still waits, not every half message since the last.
        """
        resolved = self.resolved
        runs: list[tuple[int, int]] = []
        first = -1
        for q in range(start, end):
            if q in resolved:
                if first >= 0:
                    runs.append((first, q))
                    first = -1
            elif first < 0:
                first = q
        if first >= 0:
            runs.append((first, end))
        return runs

    def refresh(self) -> None:
        """Read the op and half records stored since the last refresh into ``resolved`` and ``live``."""
        self._catch_up_ops()  # on a master: one read that finds nothing new
        live, resolved = self.live, self.resolved
        for origin in [o for o in live if o in resolved]:
            del live[origin]
        end = self.store.max_offset(HALF_TOPIC, 0)
        records = [
            r
            for first, last in self._unresolved_runs(self._half_next, end)
            for r in self._records(HALF_TOPIC, first, last)
        ]
        self._half_next = max(self._half_next, end)
        for r in records:
            props = decode_properties(r.properties)
            raw_origin = props.get(ORIGIN_OFFSET, "")
            origin = int(raw_origin) if raw_origin.isdigit() else r.queue_offset
            if self.is_resolved(origin):
                continue
            known = live.get(origin)
            if known is not None and known.queue_offset >= r.queue_offset:
                continue  # an older copy: the newer one (put back by the check service) stands
            raw_times = props.get(TRANSACTION_CHECK_TIMES, "0")
            raw_immunity = props.get(CHECK_IMMUNITY_TIME_IN_SECONDS, "")
            live[origin] = HalfEntry(
                queue_offset=r.queue_offset,
                commitlog_offset=r.physical_offset,
                store_timestamp=r.store_timestamp,
                origin=origin,
                group=props.get(PGROUP, ""),
                check_times=int(raw_times) if raw_times.isdigit() else 0,
                immunity_ms=int(raw_immunity) * 1000 if raw_immunity.isdigit() else 0,
                props=props,
            )
        self._half_next = max(self._half_next, self.half_offset)
        self.horizon = min(live, default=self._half_next)

    def waiting(self) -> list[HalfEntry]:
        """The half messages still waiting for an outcome, oldest copy first (after a refresh)."""
        self.refresh()
        return sorted(self.live.values(), key=lambda e: e.queue_offset)

    def pending(self, group: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """What admins see: the half messages still waiting for an outcome (oldest first)."""
        return [e.summary() for e in self.waiting() if group is None or e.group == group][:limit]

    def advance(self) -> None:
        """Move the persisted positions after a check round: past everything resolved or superseded."""
        live = self.live
        self.half_offset = min((e.queue_offset for e in live.values()), default=self._half_next)
        self.horizon = horizon = min(live, default=self._half_next)
        ops = self._ops
        while ops and ops[0][1] < horizon:
            ops.popleft()
        self.op_offset = ops[0][0] if ops else max(self.op_offset, self._op_next)
        self.resolved = {o for o in self.resolved if o >= horizon}

    # --- outcomes ----------------------------------------------------------------------------------------

    def end_transaction(self, h: EndTransactionRequest) -> str:
        """Apply a producer's END_TRANSACTION; returns what happened (for logs and tests)."""
        if h.commit_or_rollback not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            if h.commit_or_rollback != TRANSACTION_NOT_TYPE:
                log.warning("end_transaction_bad_type", type=h.commit_or_rollback, group=h.producer_group)
            return "ignored"
        found = self.find_half(h)
        if isinstance(found, str):
            return found
        raw_origin = last_property(found.properties, _ORIGIN_KEY)
        origin = int(raw_origin) if raw_origin is not None and raw_origin.isdigit() else found.queue_offset
        if self.is_resolved(origin):
            log.info("end_transaction_already_resolved", origin=origin, msg_id=h.msg_id)
            return "duplicate"
        if h.commit_or_rollback == TRANSACTION_COMMIT_TYPE:
            return "commit" if self._commit(found, origin, h.commit_log_offset) else "failed"
        if not self._put_op(origin):
            return "failed"
        self.rollbacks += 1
        return "rollback"

    def find_half(self, h: EndTransactionRequest, *, quiet: bool = False) -> FoundHalf | str:
        """The half message ``h`` names, or why there is none ("not-found", "mismatch"; logged unless
        ``quiet``). Also how the broker's ACL finds the topic of a request that names none
        (:mod:`pymq.broker.transaction.acl`: it logs its refusals)."""
        view = self.store.read_record(h.commit_log_offset)
        if view is None:
            if not quiet:
                log.warning("end_transaction_half_not_found", offset=h.commit_log_offset, group=h.producer_group)
            return "not-found"
        try:
            fields = unpack_record(view)
        except MessageDecodeError:
            if not quiet:
                log.warning("end_transaction_half_unreadable", offset=h.commit_log_offset)
            return "not-found"
        queue_offset, topic_at, props_at, end = fields[9], fields[14], fields[15], fields[16]
        props = bytes(view[props_at:end])
        real_topic = last_property(props, _REAL_TOPIC_KEY)
        if (
            view[topic_at : props_at - 2] != _HALF_TOPIC_B
            or queue_offset != h.tran_state_table_offset
            or last_property(props, _PGROUP_KEY) != h.producer_group.encode()
            # The topic the ACL checked PUB on (when the request names one) must be the half's real topic.
            or (h.topic is not None and real_topic != h.topic.encode())
            # The half queue's own entry must point at it: record-like bytes inside some message's
            # body (a forged physical-offset field included) are no half message.
            or self.store.physical_offset_at(HALF_TOPIC, 0, h.tran_state_table_offset) != h.commit_log_offset
        ):
            # RocketMQ's checkPrepareMessage: the request must name this very half message.
            if quiet:
                return "mismatch"
            log.warning(
                "end_transaction_mismatch",
                offset=h.commit_log_offset,
                group=h.producer_group,
                half_offset=h.tran_state_table_offset,
                topic=h.topic,
            )
            return "mismatch"
        real = "" if real_topic is None else real_topic.decode(errors="replace")
        return FoundHalf(view, queue_offset, props, real)

    def _commit(self, half: FoundHalf, origin: int, half_phys: int) -> bool:
        topic = half.real_topic
        tc = self.topics.get(topic) if topic else None
        if tc is None:
            log.warning("commit_topic_gone", topic=topic, origin=origin)
            return self._put_op(origin)  # nowhere to deliver: resolved, not retried forever
        raw_qid = last_property(half.properties, _REAL_QID_KEY)
        qid = int(raw_qid) if raw_qid is not None and raw_qid.isdigit() else 0
        if qid >= tc.writeQueueNums:
            qid %= tc.writeQueueNums
        # The half's own record, moved back (its properties edited as bytes, not decoded and re-encoded).
        final = moved_record(
            half.record,
            0,
            topic.encode(),
            strip_properties(half.properties, _NOT_COMMITTED),
            tx_type=TRANSACTION_COMMIT_TYPE,
            prepared_tx_offset=half_phys,
        )
        op = self._op_record(origin)
        # One atomic call: the message and its op record stand or fall together. (Not through the
        # put path: the committed message carries no TRAN_MSG and transactional messages are never
        # delayed, so no put hook applies to it.)
        try:
            answers = self.store.put_batches([(topic, qid, final), (OP_TOPIC, 0, op)], atomic=True)
        except Exception:
            log.exception("commit_failed", topic=topic, origin=origin)
            return False
        res, op_res = answers[0][0], answers[1][0]
        if res.status != PutStatus.PUT_OK or op_res.status != PutStatus.PUT_OK:
            log.warning("commit_failed", topic=topic, origin=origin, status=res.status.name, reason=res.reason)
            return False
        self.stats.record_put_one(topic, res.size)
        self._op_stored(op_res, origin)
        self.commits += 1
        return True

    def _op_record(self, origin: int) -> bytes:
        return encode_record(OP_TOPIC.encode(), str(origin).encode(), _OP_PROPS, born_timestamp=self.clock.time_ms())

    def _put_op(self, origin: int) -> bool:
        try:
            res = self.store.put_batches([(OP_TOPIC, 0, self._op_record(origin))])[0][0]
        except Exception:
            log.exception("op_put_failed", origin=origin)
            return False
        if res.status != PutStatus.PUT_OK:
            log.warning("op_put_failed", origin=origin, status=res.status.name, reason=res.reason)
            return False
        self._op_stored(res, origin)
        return True

    def _op_stored(self, res: PutResult, origin: int) -> None:
        self.live.pop(origin, None)
        self.resolved.add(origin)
        self._ops.append((res.queue_offset, origin))
        self._op_next = res.queue_offset + 1

    # --- check-back support -----------------------------------------------------------------------------

    def put_back(self, e: HalfEntry) -> PutResult | None:
        """Store ``e`` again at the half queue's end with one more check counted; None if that failed."""
        view = self.store.read_record(e.commitlog_offset)
        if view is None:
            return None
        r = parse_record(view)
        props = dict(e.props)
        props[TRANSACTION_CHECK_TIMES] = str(e.check_times + 1)
        props[ORIGIN_OFFSET] = str(e.origin)
        rec = reencode(r, HALF_TOPIC.encode(), encode_properties(props))
        res = self.store.put_batches([(HALF_TOPIC, 0, rec)])[0][0]
        if res.status != PutStatus.PUT_OK:
            log.warning("half_put_back_failed", origin=e.origin, status=res.status.name, reason=res.reason)
            return None
        # The copy stands for the message from now on (the next refresh reads the same record).
        self.live[e.origin] = HalfEntry(
            res.queue_offset, res.physical_offset, res.store_timestamp, e.origin, e.group,
            e.check_times + 1, e.immunity_ms, props,
        )  # fmt: skip
        return res

    def discard(self, e: HalfEntry) -> bool:
        """Checks used up: store the half message in TRANS_CHECK_MAX_TIME_TOPIC and resolve it."""
        view = self.store.read_record(e.commitlog_offset)
        if view is None:
            return self._put_op(e.origin)
        self.topics.ensure_system_topic(CHECK_MAX_TOPIC, 1)
        rec = reencode(parse_record(view), CHECK_MAX_TOPIC.encode(), encode_properties(e.props))
        op = self._op_record(e.origin)
        answers = self.store.put_batches([(CHECK_MAX_TOPIC, 0, rec), (OP_TOPIC, 0, op)], atomic=True)
        if answers[0][0].status != PutStatus.PUT_OK or answers[1][0].status != PutStatus.PUT_OK:
            return False
        self._op_stored(answers[1][0], e.origin)
        self.discarded += 1
        log.warning(
            "transaction_discarded",
            group=e.group,
            msg_id=e.props.get(Prop.UNIQ_KEY, ""),
            topic=e.props.get(Prop.REAL_TOPIC, ""),
            check_times=e.check_times,
            to=CHECK_MAX_TOPIC,
        )
        return True

    @staticmethod
    def pick(channels: list[Any]) -> Any | None:
        """One open producer channel of the group (RocketMQ: any live producer of the group)."""
        open_ = [c for c in channels if c.channel.is_open]
        return random.choice(open_) if open_ else None


__all__ = ["ORIGIN_OFFSET", "SYSTEM_GROUP", "HalfEntry", "TransactionalMessageService"]
