"""The message store: mmap commitlog, consume queues, index files, flush, recovery, cleanup.

No sockets and no asyncio here; the broker drives it. Byte layouts: ``docs/STORE.md``.
"""

from pymq.broker.store.message_store import MessageStore
from pymq.broker.store.results import GetResult, GetStatus, PutResult, PutStatus

__all__ = ["GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus"]
