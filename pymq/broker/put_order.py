"""The broker's put hooks in their order (the app's wiring and the tests build the put path from it).

Order matters: transactions' half messages first (never delayed), then timers, delay levels,
and priority levels last (a due timer message enters its level when it is delivered).
"""

from __future__ import annotations

from collections.abc import Sequence

from pymq.broker.delay.hook import DelayHook
from pymq.broker.put_path import PutHook
from pymq.broker.transaction.hook import TransactionHook


def ordered_hooks(
    transaction: PutHook, delay: PutHook, *, timer: PutHook | None = None, priority: PutHook | None = None
) -> list[PutHook]:
    """The hooks the broker has, in the order they must run."""
    return [transaction, *([timer] if timer is not None else []), delay, *([priority] if priority is not None else [])]


def default_put_hooks(delay_levels_ms: Sequence[int]) -> list[PutHook]:
    """A broker's hooks without timers or priorities: transactions' half messages, then delay levels."""
    return ordered_hooks(TransactionHook(), DelayHook(list(delay_levels_ms)))


__all__ = ["default_put_hooks", "ordered_hooks"]
