"""Broker-side put hooks: rewrite a batch's records before the store sees them.

The store stores what it is given (:meth:`MessageStore.put_batches`). Anything that moves
a record elsewhere first — delay levels (:mod:`pymq.broker.delay.hook`), transactions' half
topic (:mod:`pymq.broker.transaction.hook`); timers and priorities later — is a :class:`PutHook`. Every put of the
broker (send, send-back, scheduled delivery) goes through one :class:`PutPath`, which runs
the hooks in order, stores the resulting segments in one store call (one lock hold, one
store time) and hands back one result per record of the original batch, in order.

A hook splits a batch into consecutive *segments* ``(topic, queue_id, records)``: records
it leaves alone stay in the segment they came in, a record it moves becomes its own
segment. Segments keep the batch's record order, so the store's answers for them,
concatenated, line up with the original records; they are stored atomically (if a file
cannot be created, none stays), as one batch is. A hook must be cheap when it has nothing
to do: the path validates the batch once (:meth:`MessageStore.split`), and
:meth:`PutHook.wants` looks only at the valid records' property bytes (a substring search
per record, bodies skipped) before any per-record work; the same split then goes to the
store, so nothing is validated twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from pymq.broker.store.results import PutResult, PutResults, PutStatus
from pymq.errors import MessageDecodeError
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import Buffer
from pymq.protocol.record import MAX_PROPERTIES_SIZE, RecordFields, iter_spans, parse_record
from pymq.protocol.record_batch import any_property_contains

if TYPE_CHECKING:
    from pymq.broker.store import MessageStore
    from pymq.protocol.record_batch import SplitBatch

#: (topic, queue id, encoded records)
Segment = tuple[str, int, bytes]

#: the broker's put path: (topic, queue id, records) -> one result per record
PutMessages = Callable[[str, int, Buffer], PutResults]

#: a put's status -> the response code a request that put it answers with
PUT_STATUS_TO_CODE = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.OS_PAGE_CACHE_BUSY: ResponseCode.SYSTEM_BUSY,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}


def movable_record(data: bytes, pos: int, size: int, topic_b: bytes, max_message_size: int) -> RecordFields | None:
    """The record at ``pos`` if a hook may move it, else None (the store then judges it where it stands).

    Movable: a whole record with a good CRC, on the batch's own topic, within the size limits.
    """
    try:
        r = parse_record(data, pos, check_crc=True)
    except MessageDecodeError:
        return None
    if r.total_size != size or r.topic != topic_b or size > max_message_size or len(r.properties) > MAX_PROPERTIES_SIZE:
        return None
    return r


def move_records(topic: str, queue_id: int, data: bytes, move: Callable[[int, int], Segment | None]) -> list[Segment]:
    """A hook's ``rewrite`` by record: ``move(pos, size)`` gives a record's new segment or None.

    Records left alone stay in runs of the original ``(topic, queue_id)`` in order, so a
    batch no record of which moves comes back whole (the path then skips re-validation).
    """
    return _around_moved(topic, queue_id, data, ((pos, size, move(pos, size)) for pos, size in iter_spans(data)))


def move_valid_records(
    topic: str, queue_id: int, data: bytes, split: SplitBatch, move: Callable[[int, int, int], Segment | None]
) -> list[Segment]:
    """:func:`move_records` over the records ``split`` found valid: ``move(pos, size, props_at)``.

    The others stay where they are, for the store to refuse. A batch of one record moved
    comes back as its one segment (a single send's usual case, without the loop).
    """
    positions, sizes, props_ats, _rejected = split
    if len(positions) == 1 and sizes[0] == len(data):
        moved = move(positions[0], sizes[0], props_ats[0])
        return [(topic, queue_id, data)] if moved is None else [moved]
    records = zip(positions, sizes, props_ats, strict=True)
    moves = ((pos, size, move(pos, size, props_at)) for pos, size, props_at in records)
    return _around_moved(topic, queue_id, data, moves)


def _around_moved(
    topic: str, queue_id: int, data: bytes, moves: Iterable[tuple[int, int, Segment | None]]
) -> list[Segment]:
    """The segments of ``data``: each moved record's own (``moves``: position, size, segment or None
    per record, in order) and runs of the records left in place between them."""
    out: list[Segment] = []
    kept_from = 0  # start of the records not moved yet
    for pos, size, moved in moves:
        if moved is None:
            continue
        if pos > kept_from:
            out.append((topic, queue_id, data[kept_from:pos]))
        out.append(moved)
        kept_from = pos + size
    if not out:
        return [(topic, queue_id, data)]
    if kept_from < len(data):
        out.append((topic, queue_id, data[kept_from:]))
    return out


class PutRefused(Exception):
    """Raised by a hook's ``rewrite`` to refuse the whole request (e.g. a timer beyond the maximum delay).

    :meth:`PutPath.put` answers every record of the request with ``status`` and ``reason``.
    """

    def __init__(self, status: PutStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class PutHook(Protocol):
    """One step of the put path.

    A hook whose ``wants`` is exactly "the properties of a valid record contain one of these
    byte strings" says so with a ``property_needles`` attribute (a tuple of bytes): the path
    then answers all such hooks with one search of the record's properties per send instead
    of a ``wants`` call per hook (see :meth:`PutPath.put`). ``wants`` must still answer the same.

    A hook whose segments on some topics are final (no later hook may want them: the half
    messages of transactions, stripped of what would delay them) names those topics in a
    ``settled_topics`` attribute: the later hooks never see those segments (nor split them).

    A hook may also have ``rewrite_split(topic, queue_id, data, split)``: ``rewrite`` given the
    batch's :meth:`MessageStore.split`, whose valid records it need not parse and check again
    (see :func:`move_valid_records`); the path calls it instead of ``rewrite`` when it has the split.
    """

    def install(self, store: MessageStore) -> None:
        """Register what the store needs to know (e.g. a topic's tags-code rule), before it starts."""

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        """Whether a valid record of ``data`` (where ``split`` says) is for this hook (cheap: properties only)."""

    def rewrite(self, topic: str, queue_id: int, data: bytes) -> list[Segment]:
        """The batch as consecutive segments, records in their original order."""


class PutPath:
    """The broker's way into the store: hooks first, then one ``put_batches`` call."""

    def __init__(self, store: MessageStore, hooks: Sequence[PutHook] = ()) -> None:
        self.store = store
        self.hooks = tuple(hooks)
        for hook in self.hooks:
            hook.install(store)

    @property
    def hooks(self) -> tuple[PutHook, ...]:
        return self._hooks

    @hooks.setter
    def hooks(self, hooks: Sequence[PutHook]) -> None:
        self._hooks = tuple(hooks)
        needles: list[bytes] = []
        #: hooks asked one by one on every put (those without ``property_needles``)
        self._asked: tuple[PutHook, ...] = ()
        for hook in self._hooks:
            declared = getattr(hook, "property_needles", None)
            if declared is None:
                self._asked += (hook,)
            else:
                needles.extend(n for n in declared if n not in needles)
        #: the hooks' ``rewrite_split`` (None: the hook has none), by position
        self._split_rewrites = tuple(getattr(hook, "rewrite_split", None) for hook in self._hooks)
        #: the topics whose segments each hook makes final (its ``settled_topics``), by position
        self._settled = tuple(frozenset(getattr(hook, "settled_topics", ())) for hook in self._hooks)
        #: every needle of the hooks that declare theirs, for the batches' scan (one per needle)
        self._needles = tuple(needles)
        #: the same as one search, for single records (one call however many hooks)
        self._scan = re.compile(b"|".join(re.escape(n) for n in needles)).search if needles else None

    def _anyone_wants(self, data: bytes, split: SplitBatch) -> bool:
        """Whether some hook wants the batch: the declared needles in one scan, then the other hooks."""
        scan = self._scan
        if scan is not None:
            positions = split.positions
            if len(positions) == 1:  # single sends: one search of the one record's properties
                if scan(data, split.props_ats[0], positions[0] + split.sizes[0]) is not None:
                    return True
            elif positions:
                for needle in self._needles:
                    if any_property_contains(data, split, needle):
                        return True
        for hook in self._asked:  # noqa: SIM110 - any() would make a generator per put
            if hook.wants(data, split):
                return True
        return False

    def put(self, topic: str, queue_id: int, data: bytes | bytearray | memoryview) -> PutResults:
        """Store the records of ``data`` for ``(topic, queue_id)``; one result per record, in order."""
        if not isinstance(data, bytes):
            data = bytes(data)
        if not self._hooks:
            return self.store.put(topic, queue_id, data)
        store = self.store
        split = store.split(topic, data)
        if not self._anyone_wants(data, split):  # no hook wants it: the batch as it came, split already made
            return store.put(topic, queue_id, data, split)
        try:
            rewritten = self._rewrite(topic, queue_id, data, split)
        except PutRefused as refused:
            return [PutResult(refused.status, reason=refused.reason)] * max(
                len(split.positions) + len(split.rejected), 1
            )
        if rewritten is None:
            return store.put(topic, queue_id, data, split)
        segments, splits = rewritten
        if len(segments) == 1 and segments[0][2] is data and segments[0][0] == topic and segments[0][1] == queue_id:
            # no hook moved anything: the batch as it came, with the split already made
            return store.put(topic, queue_id, data, split)
        if len(segments) == 1:
            return store.put_batches(segments, splits=splits)[0]
        # The pieces of one request stand or fall together, as one batch does.
        answers = store.put_batches(segments, atomic=True, splits=splits)
        return [r for answer in answers for r in answer]

    def put_queues(self, batches: list[Segment]) -> list[PutResults]:
        """Store several queues' batches (the broker's own records: acks of the pop revive log, one
        revive queue each): one store call when no hook wants any of them, else each as :meth:`put`.
        One result list per batch, in order; a batch the store refuses does not undo the others."""
        if len(batches) == 1:
            return [self.put(*batches[0])]
        if not self._hooks:
            return self.store.put_batches(batches)
        store = self.store
        splits = [store.split(topic, data) for topic, _qid, data in batches]
        if any(self._anyone_wants(data, split) for (_t, _q, data), split in zip(batches, splits, strict=True)):
            return [self.put(*batch) for batch in batches]
        return store.put_batches(batches, splits=splits)

    def _rewrite(
        self, topic: str, queue_id: int, data: bytes, split: SplitBatch
    ) -> tuple[list[Segment], list[SplitBatch | None]] | None:
        """The hooks' segments and the split of each (None: not made), or None when no hook wanted the batch.

        Each segment is split once (:meth:`MessageStore.split`): the later hooks' ``wants`` and
        the store's put use the same split.
        """
        store = self.store
        segments: list[Segment] | None = None
        splits: list[SplitBatch | None] = []
        #: topics whose segments no later hook sees (the ``settled_topics`` of the hooks that ran: a
        #: half message skips the later hooks and their split)
        final: frozenset[str] = frozenset()
        for hook, rewrite_split, settled in zip(self.hooks, self._split_rewrites, self._settled, strict=True):
            if segments is None:
                if hook.wants(data, split):
                    if rewrite_split is not None:
                        segments = rewrite_split(topic, queue_id, data, split)
                    else:
                        segments = hook.rewrite(topic, queue_id, data)
                    splits = [split if seg[2] is data and seg[0] == topic else None for seg in segments]
                    final = settled
                continue
            new_segments: list[Segment] = []
            new_splits: list[SplitBatch | None] = []
            for seg, seg_split in zip(segments, splits, strict=True):
                if seg[0] in final:
                    new_segments.append(seg)
                    new_splits.append(seg_split)
                    continue
                if seg_split is None:
                    seg_split = store.split(seg[0], seg[2])
                if not hook.wants(seg[2], seg_split):
                    new_segments.append(seg)
                    new_splits.append(seg_split)
                    continue
                out = rewrite_split(*seg, seg_split) if rewrite_split is not None else hook.rewrite(*seg)
                for moved in out:
                    new_segments.append(moved)
                    new_splits.append(seg_split if moved[2] is seg[2] and moved[0] == seg[0] else None)
            segments, splits = new_segments, new_splits
            final |= settled
        return None if segments is None else (segments, splits)


__all__ = [
    "PUT_STATUS_TO_CODE",
    "PutHook",
    "PutMessages",
    "PutPath",
    "PutRefused",
    "Segment",
    "move_records",
    "move_valid_records",
]
