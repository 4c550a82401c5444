"""Which commitlog ranges the sync workers have claimed, and how far the synced prefix reaches.

SYNC_FLUSH runs more than one sync at a time: a worker that becomes free while another is
inside ``msync`` claims the range written since the last claim and syncs it at once,
instead of queueing behind the running sync (which a send arriving mid-sync used to wait
for, then for its own). Ranges may finish in any order; only the **contiguous** prefix
from the start is durable, and only it answers senders and reaches the checkpoint.

Pure bookkeeping, no threads and no I/O: the flusher calls it under its own lock.

* :meth:`SyncRanges.claim` hands out ``[claimed, end)`` and moves ``claimed`` to ``end``.
* :meth:`SyncRanges.finish` records a range as synced (or failed) and advances ``durable``
  over every finished range that touches it (ranges may overlap after a failure: the
  failed range is claimed again from its start).
* A truncation of the commitlog (an undone atomic put, a slave cutting its log) bumps the
  file queue's generation; :meth:`reset` then restarts from the truncated flushed offset,
  and ranges claimed before it no longer count when they finish.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Claim:
    """One worker's range ``[start, end)``; ``ts`` is the newest store time below ``end``."""

    start: int
    end: int
    ts: int
    generation: int
    done: bool = field(default=False)


class SyncRanges:
    """Claimed and finished sync ranges, and the durable prefix they add up to."""

    def __init__(self, durable: int, generation: int = 0) -> None:
        #: everything below this offset is synced
        self.durable = durable
        #: everything below this offset is synced or being synced
        self.claimed = durable
        #: store time of the newest record below ``durable`` (-1: none recorded yet)
        self.durable_ts = -1
        self.generation = generation
        self._claims: list[Claim] = []

    @property
    def in_flight(self) -> int:
        return sum(1 for c in self._claims if not c.done)

    def reset(self, durable: int, generation: int) -> None:
        """Start over from ``durable`` (after a truncation): earlier claims no longer count."""
        self.durable = self.claimed = durable
        self.generation = generation
        self._claims = []

    def claim(self, end: int, ts: int) -> Claim | None:
        """The range from the last claim up to ``end``, or None if nothing new is below ``end``."""
        if end <= self.claimed:
            return None
        c = Claim(self.claimed, end, ts, self.generation)
        self.claimed = end
        self._claims.append(c)
        return c

    def finish(self, claim: Claim, ok: bool) -> bool:
        """Record ``claim`` as synced (``ok``) or failed; True if ``durable`` moved."""
        if claim.generation != self.generation or claim not in self._claims:
            return False  # claimed before a truncation: what it synced is gone
        if not ok:
            self._claims.remove(claim)
            # Whatever it covered must be synced again: the next claim starts at its start
            # (and may overlap later claims; finish handles overlaps).
            self.claimed = max(min(self.claimed, claim.start), self.durable)
            return False
        claim.done = True
        moved = False
        progress = True
        while progress:
            progress = False
            for c in self._claims:
                if c.done and c.start <= self.durable < c.end:
                    self.durable = c.end
                    self.durable_ts = max(self.durable_ts, c.ts)
                    moved = progress = True
        if moved:
            self._claims = [c for c in self._claims if not (c.done and c.end <= self.durable)]
            # After a failure a re-claim may end below a later range that finished since.
            self.claimed = max(self.claimed, self.durable)
        return moved
