"""Status codes and result types of the store API."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import repeat
from typing import NamedTuple, overload


class PutStatus(IntEnum):
    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPPED_FILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGE_CACHE_BUSY = 8
    UNKNOWN_ERROR = 9


class PutResult(NamedTuple):
    """The fate of one message of a batch. Offsets are -1 unless the status is PUT_OK."""

    status: PutStatus
    queue_offset: int = -1
    physical_offset: int = -1
    size: int = 0
    store_timestamp: int = 0
    #: where it was stored (differs from the request for delayed messages)
    topic: str = ""
    queue_id: int = -1
    reason: str = ""


_new_result = tuple.__new__


class StoredRun(Sequence[PutResult]):
    """The results of a batch stored whole, all PUT_OK, in order: one object, not one per record.

    What :meth:`MessageStore.put_batches` answers for a batch of several records none of which was
    refused. It is a read-only sequence of :class:`PutResult` (made on access) equal to the list of
    them; the send path reads its columns instead (:attr:`physical_offsets`, :attr:`sizes`).
    """

    __slots__ = ("first_queue_offset", "physical_offsets", "queue_id", "sizes", "store_timestamp", "topic")

    def __init__(
        self,
        topic: str,
        queue_id: int,
        first_queue_offset: int,
        physical_offsets: list[int],
        sizes: list[int],
        store_timestamp: int,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.first_queue_offset = first_queue_offset
        #: each record's commitlog offset, and its size (do not modify)
        self.physical_offsets = physical_offsets
        self.sizes = sizes
        self.store_timestamp = store_timestamp

    def __len__(self) -> int:
        return len(self.physical_offsets)

    def __iter__(self) -> Iterator[PutResult]:
        # PutResult(PUT_OK, queue offset, commitlog offset, size, store time, topic, queue id, ""), built in C
        first = self.first_queue_offset
        return map(
            _new_result,
            repeat(PutResult),
            zip(
                repeat(PutStatus.PUT_OK),
                range(first, first + len(self.physical_offsets)),
                self.physical_offsets,
                self.sizes,
                repeat(self.store_timestamp),
                repeat(self.topic),
                repeat(self.queue_id),
                repeat(""),
                strict=False,
            ),
        )

    @overload
    def __getitem__(self, index: int) -> PutResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[PutResult]: ...
    def __getitem__(self, index: int | slice) -> PutResult | list[PutResult]:
        if isinstance(index, slice):
            return list(self)[index]
        n = len(self.physical_offsets)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("result index out of range")
        return PutResult(
            PutStatus.PUT_OK,
            self.first_queue_offset + i,
            self.physical_offsets[i],
            self.sizes[i],
            self.store_timestamp,
            self.topic,
            self.queue_id,
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredRun | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Sequence[PutResult]) -> list[PutResult]:
        """Concatenated with other results, a list (as the list it stands for would be)."""
        return [*self, *other]

    def __radd__(self, other: Sequence[PutResult]) -> list[PutResult]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"StoredRun({list(self)!r})"


#: what a put answers for one batch: one result per record, in order
PutResults = Sequence[PutResult]


class GetStatus(IntEnum):
    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


@dataclass(slots=True)
class GetResult:
    """Messages read from one queue: stored records as zero-copy buffer slices.

    ``buffers`` holds runs of adjacent records (one slice may carry several);
    ``message_count`` counts records.
    """

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)
    message_count: int = 0
    total_size: int = 0
    #: commitlog offset after the last record read (lag estimates, slave-read suggestion)
    max_physical_offset_read: int = 0
    #: commitlog offset of the first record read (what MessageStore.pages_missing looks at)
    min_physical_offset_read: int = 0
