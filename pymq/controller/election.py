"""Who becomes a group's master. Pure.

Only replicas of the sync-state set are eligible (they hold every acknowledged write); among
the live ones: the higher epoch, then the larger max offset, then the higher configured
priority, then the lower address (so the choice is deterministic). An *unclean* election,
off by default, falls back to any live replica when no in-sync one is alive: it may lose
acknowledged writes.
"""

from __future__ import annotations

from collections.abc import Collection

from pymq.controller.state import GroupState, Replica


def rank(r: Replica) -> tuple[int, int, int]:
    return (r.epoch, r.max_offset, r.priority)


def elect(group: GroupState, alive: Collection[str], *, unclean: bool = False) -> str | None:
    """The address to make master, or None when no eligible replica is alive."""
    live = [r for a, r in group.replicas.items() if a in alive]
    candidates = [r for r in live if r.address in group.sync_set]
    if not candidates and unclean:
        candidates = live
    if not candidates:
        return None
    best = max(candidates, key=lambda r: (rank(r), _neg(r.address)))
    return best.address


def _neg(address: str) -> tuple[int, ...]:
    """Orders addresses so that max() picks the lowest."""
    return tuple(-ord(c) for c in address)


__all__ = ["elect", "rank"]
