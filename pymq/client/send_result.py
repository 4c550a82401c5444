"""What a send returns: the status and where the message was stored."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from pymq.protocol.record import offset_msg_id, pack_host
from pymq.protocol.route import MessageQueue

__all__ = ["SendResult", "SendStatus"]


class SendStatus(StrEnum):
    """Every status means the broker stored the message; the others say what is not yet durable."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    #: the producer-assigned unique id (UNIQ_KEY) of the (first) message
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    #: every message's unique id (one entry for a single send)
    msg_ids: list[str] = field(default_factory=list)
    commit_log_offsets: list[int] = field(default_factory=list)
    store_addr: str = ""

    @property
    def offset_msg_id(self) -> str:
        """The broker-side id (store address + commitlog offset) of the (first) message."""
        ids = self.offset_msg_ids
        return ids[0] if ids else ""

    @property
    def offset_msg_ids(self) -> list[str]:
        host, _, port = self.store_addr.rpartition(":")
        packed = pack_host(host, int(port or 0))
        return [offset_msg_id(packed, off) for off in self.commit_log_offsets]
