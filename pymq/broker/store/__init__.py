"""The message store: mmap commitlog, consume queues, index files, flush, recovery, cleanup.

No sockets and no asyncio here; the broker drives it. Byte layouts: ``docs/STORE.md``.
Code outside the store uses :class:`MessageStore`'s methods and the names below; it never
reads the store's parts (``commitlog``, ``queues``, ``lock``, ``appender``) or entry layouts.
``config_files`` (atomic JSON for broker state) and ``results`` are public modules too.
"""

from pymq.broker.store.consume_queue import BLANK_SIZE
from pymq.broker.store.message_store import MessageStore, QueueEntries
from pymq.broker.store.results import GetResult, GetStatus, PutResult, PutResults, PutStatus, StoredRun

__all__ = [
    "BLANK_SIZE",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "PutResults",
    "PutStatus",
    "QueueEntries",
    "StoredRun",
]
