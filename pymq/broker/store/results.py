"""Status codes and result types of the store API."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple


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
