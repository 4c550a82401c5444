"""The timer delivery state a slave copies (GET_TIMER_CHECK_POINT): never claims undelivered units delivered."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from pymq.broker.timer.checkpoint import TimerCheckpoint
from pymq.broker.timer.service import TimerService
from pymq.broker.timer.timer_log import TimerUnit
from pymq.config import BrokerConfig


def service(tmp_path: Path) -> TimerService:
    cfg = BrokerConfig(store={"store_dir": str(tmp_path)}, timer_precision_ms=1000)
    return TimerService(SimpleNamespace(config=cfg, store=None))  # type: ignore[arg-type]


def test_sync_state_is_the_cursor_offsets_and_merge_index(tmp_path: Path) -> None:
    svc = service(tmp_path)
    assert svc.sync_state()["cursorMs"] == -1  # not started: nothing to take over from
    svc.cursor_ms = 50_000
    svc.queue_offsets = {0: 7, 1: 3}
    svc.merge = {"t\x01k": [60_000, 10, 100, 2]}
    ck = TimerCheckpoint.from_json(svc.sync_state())
    assert (ck.cursor_ms, ck.queue_offsets, ck.merge) == (50_000, {0: 7, 1: 3}, {"t\x01k": [60_000, 10, 100, 2]})


def test_units_filed_late_into_the_firing_slot_pull_the_copied_cursor_back(tmp_path: Path) -> None:
    """A unit due at 47.5 s filed late into slot 50 s and not delivered yet: the copy's cursor is
    47 s, so a slave taking over files it again instead of counting it delivered."""
    svc = service(tmp_path)
    svc.cursor_ms = 50_000
    svc.firing = [TimerUnit(0, -1, 50_000, 50_200, 0, 100, 0)]
    svc.late = [TimerUnit(40, -1, 50_000, 47_500, 100, 100, 0)]
    assert svc.sync_state()["cursorMs"] == 47_000
    svc.late = []
    assert svc.sync_state()["cursorMs"] == 50_000
