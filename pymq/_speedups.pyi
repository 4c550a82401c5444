"""Types of the optional C accelerator (pymq/_speedups_src/).

pymq.protocol.record and record_batch use its functions; the store its Syncer (SYNC_FLUSH).
"""

from collections.abc import Callable, Iterator, Sequence
from types import NotImplementedType
from typing import Any

from pymq.protocol.record import Buffer, RecordTuple

LAYOUT: dict[str, int | str]
#: the store's index file layout the build was made for (pymq.broker.store.index checks it)
INDEX_LAYOUT: dict[str, int | str]
#: the consume-queue entry layout the build was made for (pymq.broker.store.dispatcher checks it)
CQ_LAYOUT: dict[str, int | str]
#: 1 when the CRC is zlib's (found at build), 0 when it is the extension's own table
HAVE_ZLIB: int
#: 1 when the CRC folds 16-byte blocks with PCLMULQDQ (x86-64 with the instruction, checked at import)
HAVE_CLMUL: int

def split_batch(
    data: bytes,
    topic_field: bytes,
    max_size: int,
    reject_reason: Callable[[bytes, int, int, int, bytes, int], str],
) -> tuple[list[int], list[int], list[int], list[tuple[int, int, str]]] | NotImplementedType: ...
def any_property_contains(
    data: bytes, positions: list[int], sizes: list[int], props_ats: list[int], needle: bytes
) -> bool | NotImplementedType: ...
def patch_broker_blocks(
    buf: Buffer,
    positions: list[int],
    queue_id: int,
    first_queue_offset: int,
    base: int,
    store_timestamp: int,
    store_host: bytes,
) -> NotImplementedType | None: ...
def index_put(
    buf: Any,
    entries_base: int,
    slots_base: int,
    slots: int,
    count: int,
    entries: list[tuple[int, int]],
    tdiff: int,
) -> int | NotImplementedType: ...
def encode_record(
    topic: bytes,
    body: bytes,
    properties: bytes,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    reconsume_times: int,
    prepared_tx_offset: int,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: bytes,
) -> bytes | NotImplementedType: ...
def encode_batch(
    messages: list[Any],
    topic: str,
    topic_bytes: bytes,
    born_timestamp: int,
    born_host: bytes,
    max_size: int,
    compress_threshold: int,
    id_head: str,
    counter: Iterator[int],
) -> tuple[bytes, list[str]] | NotImplementedType: ...
def set_message_class(cls: type) -> bool: ...
def cq_entries(phys: list[int], sizes: list[int], tags_codes: list[int]) -> bytes | NotImplementedType: ...
def property_codes(
    data: bytes, positions: list[int], sizes: list[int], props_ats: list[int], phys: list[int], prefix_crc: int
) -> tuple[list[int], list[tuple[int, int]]] | NotImplementedType: ...
def property_codes_one(
    data: bytes, pos: int, size: int, props_at: int, phys: object, prefix_crc: int
) -> tuple[int, list[tuple[int, int]]] | NotImplementedType: ...
def store_record(
    buf: Buffer,
    at: int,
    data: bytes,
    pos: int,
    size: int,
    queue_id: int,
    queue_offset: int,
    base: int,
    store_timestamp: int,
    store_host: bytes,
) -> NotImplementedType | None: ...
def unpack_record(buf: bytes | bytearray | memoryview, pos: int) -> RecordTuple | NotImplementedType: ...
def unpack_records(
    buf: bytes | bytearray | memoryview,
) -> tuple[list[RecordTuple], Exception | None] | NotImplementedType: ...
def record_columns(
    buf: bytes | bytearray | memoryview,
) -> (
    tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, Exception | None] | NotImplementedType
): ...
def crc32(data: Any, value: int = 0) -> int: ...
def crc32_table(data: Any, value: int = 0) -> int: ...
def stored_to_message_decoder(buf: Buffer, /) -> bytes | NotImplementedType: ...
def stored_scan(
    buf: Buffer, start: int, limit: int, base: int, check_crc: bool, max_records: int, /
) -> tuple[list[tuple[int, int, int, int, int, int, int]], int, bool] | NotImplementedType: ...
def dispatch_scan(
    buf: Buffer,
    delta: int,
    base: int,
    records: list[tuple[int, int, int, int, int, int, int]],
    topics: dict[bytes, tuple[str, int]],
    /,
) -> tuple[list[tuple[str, int, int, bytes]], list[tuple[int, list[tuple[int, int]]]]] | NotImplementedType: ...
def set_decode_error(cls: type[Exception]) -> None: ...

class Syncer:
    """msync(MS_SYNC) jobs on a thread of its own that never takes the GIL; done jobs signal an eventfd.

    Linux only (the module has no Syncer elsewhere). See pymq/_speedups_src/sync.c.
    """

    def __init__(self, capacity: int = 4) -> None: ...
    def submit(self, token: object, ranges: Sequence[tuple[int, int]]) -> None:
        """Queue a sync of each ``(address, length)``; RuntimeError if the queue is full or the syncer closed."""
    def take(self) -> list[tuple[Any, int]]:
        """The jobs done since the last call, in submit order, as ``(token, errno)`` (0: synced)."""
    def fileno(self) -> int:
        """The eventfd, readable once a job is done; ValueError after close()."""
    def close(self) -> None:
        """Sync every queued job, join the thread (idempotent; dealloc too); the eventfd stays until dealloc."""
    @property
    def pending(self) -> int: ...
    @property
    def closed(self) -> bool: ...
