"""MasterServices: the master-only services start in order, stop in reverse, both idempotent."""

from __future__ import annotations

import pytest

from pymq.broker.role.master_services import MasterServices, Step


class Recorder:
    def __init__(self, name: str, log: list[str], fail_start: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail_start = fail_start

    async def start(self) -> None:
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")


async def test_start_in_order_stop_in_reverse_and_both_idempotent() -> None:
    log: list[str] = []
    group = MasterServices([Recorder("schedule", log), Recorder("timer", log)])
    group.add(Recorder("pop", log))
    await group.start()
    await group.start()
    assert group.running
    assert log == ["start schedule", "start timer", "start pop"]
    log.clear()
    await group.stop()
    await group.stop()
    assert not group.running
    assert log == ["stop pop", "stop timer", "stop schedule"]
    log.clear()
    # a stopped group starts again (a promotion after a demotion)
    await group.start()
    assert log == ["start schedule", "start timer", "start pop"]
    await group.stop()


async def test_a_member_that_fails_to_start_stops_the_ones_before_it() -> None:
    log: list[str] = []
    group = MasterServices([Recorder("a", log), Recorder("b", log, fail_start=True), Recorder("c", log)])
    with pytest.raises(RuntimeError, match="b cannot start"):
        await group.start()
    assert log == ["start a", "stop a"]
    assert not group.running
    log.clear()
    await group.stop()  # nothing left to stop
    assert log == []


async def test_a_failing_stop_does_not_keep_the_others_running() -> None:
    log: list[str] = []

    async def boom() -> None:
        raise OSError("disk gone")

    async def noop() -> None:
        log.append("start step")

    group = MasterServices([Recorder("a", log), Step("bad", noop, boom), Recorder("c", log)])
    await group.start()
    await group.stop()
    assert log == ["start a", "start step", "start c", "stop c", "stop a"]
    assert not group.running


async def test_members_are_added_only_while_stopped() -> None:
    group = MasterServices()
    await group.start()
    with pytest.raises(RuntimeError):
        group.add(Step("late", _nothing))
    await group.stop()
    group.add(Step("late", _nothing))
    assert len(group.members) == 1


async def _nothing() -> None:
    return None
