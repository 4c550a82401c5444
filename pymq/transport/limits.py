"""What a server tolerates of its connections: idle time, slow frames, memory held in partial frames.

* **Idle timeout** (RocketMQ: 120 s, ``serverChannelMaxIdleTimeSeconds``): a connection
  that has sent nothing for that long and has no request in flight is closed. Clients
  heartbeat every 30 s, so only dead or abandoned connections go.
* **Frame read timeout**: a frame that has begun must be complete within this time, so a
  peer cannot hold a half-sent frame (and the buffer behind it) open forever by dribbling.
* **Partial-frame budget**: the bytes all connections of a server hold in frames not yet
  complete are counted; past ``max_partial_frame_bytes``, a connection whose unfinished
  frame is larger than ``large_frame_bytes`` and still growing is closed (its frame is
  refused). Small frames (heartbeats, pulls) are never refused, so an attack that pins
  memory with many half-sent large frames stops at the cap without silencing the rest.

Every refusal and close is logged with its reason. The per-read cost is a clock read and
two integer compares (see :meth:`pymq.transport.connection.Connection.data_received`);
timeouts are enforced by one sweep task per server, not by a timer per connection.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

#: the clock connections stamp their reads with (the sweep compares with the same one)
monotonic = time.monotonic

#: RocketMQ's default idle time before a server closes a channel
DEFAULT_IDLE_TIMEOUT = 120.0
DEFAULT_FRAME_READ_TIMEOUT = 60.0
DEFAULT_MAX_PARTIAL_FRAME_BYTES = 128 * 1024 * 1024
DEFAULT_LARGE_FRAME_BYTES = 64 * 1024


class Watched(Protocol):
    """What the limits read of a connection (:class:`pymq.transport.connection.Connection`)."""

    #: when bytes last arrived (``monotonic``)
    last_read: float
    #: bytes of its unfinished frame, and when that frame began
    partial_bytes: int
    partial_since: float
    #: its requests whose handlers have not answered yet, and its held requests
    inflight: int
    parked: int

    @property
    def in_flight(self) -> int:
        """Its own requests still waiting for an answer."""
        ...


@dataclass(slots=True)
class ConnectionLimits:
    """One server's limits (``None``: no limit) and its running count of partial-frame bytes."""

    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    frame_read_timeout: float | None = DEFAULT_FRAME_READ_TIMEOUT
    max_partial_frame_bytes: int | None = DEFAULT_MAX_PARTIAL_FRAME_BYTES
    large_frame_bytes: int = DEFAULT_LARGE_FRAME_BYTES
    #: bytes held right now in unfinished frames, over all connections of the server
    partial_bytes: int = 0

    @property
    def sweep_interval(self) -> float | None:
        """How often to look for expired connections (None: no timeout to enforce)."""
        timeouts = [t for t in (self.idle_timeout, self.frame_read_timeout) if t is not None]
        return min(1.0, min(timeouts) / 4) if timeouts else None

    def over_budget(self, held: int) -> bool:
        """Must a connection now holding ``held`` bytes of a growing unfinished frame be refused?"""
        cap = self.max_partial_frame_bytes
        return cap is not None and held > self.large_frame_bytes and self.partial_bytes > cap

    def expired(self, conn: Watched, now: float) -> str | None:
        """Why ``conn`` must be closed now, or None."""
        read_timeout = self.frame_read_timeout
        if read_timeout is not None and conn.partial_bytes and now - conn.partial_since > read_timeout:
            return f"frame incomplete after {read_timeout:g}s ({conn.partial_bytes} bytes received)"
        idle = self.idle_timeout
        if idle is not None and now - conn.last_read > idle and not (conn.inflight or conn.parked or conn.in_flight):
            return f"idle for more than {idle:g}s"
        return None


def limits_from_settings(
    idle_timeout: float, frame_read_timeout: float, max_partial_frame_bytes: int
) -> ConnectionLimits:
    """Limits from a daemon's settings, where 0 turns a limit off."""
    return ConnectionLimits(
        idle_timeout=idle_timeout or None,
        frame_read_timeout=frame_read_timeout or None,
        max_partial_frame_bytes=max_partial_frame_bytes or None,
    )
