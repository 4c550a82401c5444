"""The time-based sync-state set (RocketMQ 5's haMaxTimeSlaveNotCatchup) and the SYNC_MASTER ack
rule built on it (pymq.broker.ha.sync_state, pymq.broker.ha.acks). Pure; time from a FakeClock."""

from __future__ import annotations

import pytest

from pymq.broker.ha.acks import REPLICATED, TIMED_OUT, AckWaiters, SlaveState
from pymq.broker.ha.sync_state import MAX_MARKS, SlaveProgress, SyncStateSet
from pymq.config import BrokerConfig
from pymq.testing import FakeClock

WINDOW = 15.0
A, B = "127.0.0.1:2000", "127.0.0.1:3000"


class Fut:
    def __init__(self) -> None:
        self.result: int | None = None

    def done(self) -> bool:
        return self.result is not None

    def set_result(self, r: int) -> None:
        self.result = r


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def waiters(clock: FakeClock, *, k: int = 1, controlled: bool = False, max_lag: int = 10**9) -> AckWaiters:
    return AckWaiters(k, max_lag, WINDOW, controlled)


def join(w: AckWaiters, clock: FakeClock, link: int, address: str, acked: int, master_max: int) -> SlaveState:
    s = SlaveState(address, link, acked)
    w.connect(link, s, master_max, clock())
    return s


# --- catching up ----------------------------------------------------------------------------------


def test_an_ack_at_the_masters_end_is_caught_up_now(clock: FakeClock) -> None:
    p = SlaveProgress()
    SyncStateSet.acked(p, 100, 100, clock())
    assert p.caught_up_at == clock()
    clock.advance(5)
    SyncStateSet.acked(p, 100, 150, clock())  # behind now, and no mark reached: not caught up again
    assert p.caught_up_at == clock() - 5


def test_an_ack_reaching_a_mark_is_caught_up_at_the_marks_time(clock: FakeClock) -> None:
    p = SlaveProgress()
    t0 = clock()
    SyncStateSet.sent(p, 100, t0)
    clock.advance(1)
    SyncStateSet.sent(p, 200, clock())
    SyncStateSet.sent(p, 150, clock())  # not beyond the last mark: not recorded
    assert [e for e, _ in p.marks] == [100, 200]
    clock.advance(1)
    SyncStateSet.acked(p, 120, 300, clock())  # held all the master had at t0, not what it had at t0+1
    assert p.caught_up_at == t0 and [e for e, _ in p.marks] == [200]
    SyncStateSet.acked(p, 200, 300, clock())
    assert p.caught_up_at == t0 + 1 and not p.marks


def test_marks_are_capped_dropping_the_oldest(clock: FakeClock) -> None:
    p = SlaveProgress()
    for i in range(MAX_MARKS + 10):
        SyncStateSet.sent(p, 10 * (i + 1), float(i))
    assert len(p.marks) == MAX_MARKS and p.marks[0] == (110, 10.0)
    SyncStateSet.acked(p, 50, 10**6, 999.0)  # below every kept mark: no credit (conservative)
    assert p.caught_up_at == float("-inf")


# --- membership -----------------------------------------------------------------------------------


def test_a_slave_that_stops_catching_up_leaves_after_the_window_and_rejoins_once_caught_up(clock: FakeClock) -> None:
    w = waiters(clock)
    s = join(w, clock, 1, A, 100, 100)
    assert w.sync.members == {A} and w.sync.reported() == [A]
    clock.advance(WINDOW - 0.1)
    assert not w.refresh(500, clock())  # behind for 14.9 s: still in
    assert [x.address for x in w.in_sync()] == [A]
    clock.advance(0.2)
    assert w.refresh(500, clock()) and w.sync.members == set()  # 15.1 s without catching up: out
    assert not w.refresh(500, clock())
    assert not w.ack(s, 400, 500, clock())  # closer, not caught up: still out
    assert w.ack(s, 500, 500, clock()) and w.sync.members == {A}  # caught up: back in


def test_a_slave_that_keeps_up_under_load_stays_though_never_equal_to_the_masters_end(clock: FakeClock) -> None:
    w = waiters(clock)
    s = join(w, clock, 1, A, 0, 0)
    end = 0
    for _ in range(100):  # 50 s of writes; each ack arrives after the master has written more
        end += 1000
        w.sent(s, end, clock())
        clock.advance(0.5)
        w.ack(s, end, end + 1000, clock())
        assert w.sync.members == {A}
    clock.advance(WINDOW + 1)
    assert w.refresh(end + 1000, clock()) and not w.sync.members  # then it stops: out after the window


def test_a_slave_further_behind_than_max_lag_bytes_is_out_at_once(clock: FakeClock) -> None:
    w = waiters(clock, max_lag=1000)
    s = join(w, clock, 1, A, 100, 100)
    assert w.refresh(1101, clock()) and not w.sync.members  # 1001 behind, caught up a moment ago
    assert w.ack(s, 1101, 1101, clock()) and w.sync.members == {A}


def test_a_disconnected_slave_leaves_at_once(clock: FakeClock) -> None:
    w = waiters(clock)
    join(w, clock, 1, A, 100, 100)
    join(w, clock, 2, B, 100, 100)
    assert w.disconnect(1, 100, clock()) and w.sync.members == {B}
    assert not w.disconnect(1, 100, clock())


def test_a_joiner_must_hold_every_acknowledged_write(clock: FakeClock) -> None:
    """A caught up at t0 (master end 100); a write 100..150 acknowledged by B alone after t0: A,
    acking 100 later, caught up within the window but lacks it, so it does not join until it has it."""
    w = waiters(clock)
    b = join(w, clock, 2, B, 100, 100)
    a = SlaveState(A, 1, 0)
    w.connect(1, a, 100, clock())
    assert w.sync.members == {B}  # A holds nothing yet
    w.sent(a, 100, clock())
    f = Fut()
    w.add(150, clock() + 3, f)
    w.ack(b, 150, 150, clock())
    assert f.result == REPLICATED and w.sync.acknowledged == 150
    clock.advance(0.1)
    w.ack(a, 100, 150, clock())
    assert a.progress.caught_up_at == clock() - 0.1 and w.sync.members == {B}
    w.ack(a, 150, 150, clock())
    assert w.sync.members == {A, B}


def test_two_links_of_one_address_count_once(clock: FakeClock) -> None:
    w = waiters(clock, k=2)
    join(w, clock, 1, A, 100, 100)
    join(w, clock, 2, A, 90, 100)  # a reconnect while the old link lingers
    assert w.sync.members == {A} and len(w.in_sync()) == 1 and w.in_sync()[0].acked == 100
    assert not w.can_wait(100)


# --- the ack rule without a controller: the in_sync_replicas-th highest ack of the set -------------


def test_without_a_controller_the_kth_highest_ack_of_the_set_counts(clock: FakeClock) -> None:
    w = waiters(clock, k=1)
    assert not w.can_wait(0)
    a = join(w, clock, 1, A, 100, 100)
    b = join(w, clock, 2, B, 100, 100)
    futs = [Fut() for _ in range(3)]
    for i, f in enumerate(futs):
        w.add(200 * (i + 1), clock() + 3 + i, f)  # ends 200, 400, 600
    w.ack(a, 450, 600, clock())
    assert [f.result for f in futs] == [REPLICATED, REPLICATED, None]  # B need not hold them
    assert w.expire(clock() + 4.5) == clock() + 5  # nothing due; the next deadline is the head's
    assert w.expire(clock() + 5) is None and futs[2].result == TIMED_OUT
    w.in_sync_replicas = 2
    assert w.replicated_offset(600) == 100  # the second-highest
    w.ack(b, 300, 600, clock())
    assert w.replicated_offset(600) == 300


def test_a_slave_out_of_the_set_is_not_counted(clock: FakeClock) -> None:
    w = waiters(clock)
    s = join(w, clock, 1, A, 100, 100)
    clock.advance(WINDOW + 1)
    w.refresh(100_000, clock())
    f = Fut()
    w.add(200, clock() + 3, f)
    s.acked = 200  # it holds the write but is out of the set: not counted
    w.advance(100_000)
    assert f.result is None and not w.can_wait(100_000) and w.replicated_offset(100_000) == 0


# --- controller mode: every slave the controller may elect holds every acknowledged write ---------


def test_controlled_nothing_counts_until_the_controller_answered_a_set(clock: FakeClock) -> None:
    w = waiters(clock, controlled=True)
    a = join(w, clock, 1, A, 100, 100)
    assert w.sync.members == {A} and not w.sync.known
    assert not w.can_wait(100) and w.replicated_offset(100) == 0
    w.confirm([], 100)
    assert w.sync.known and w.can_wait(100) and w.replicated_offset(100) == 100  # the growth counts at once
    w.ack(a, 150, 150, clock())
    assert w.replicated_offset(150) == 150


def test_controlled_every_slave_of_the_set_must_hold_a_write(clock: FakeClock) -> None:
    w = waiters(clock, controlled=True)
    w.confirm([A, B], 0)
    a = join(w, clock, 1, A, 0, 0)
    b = join(w, clock, 2, B, 0, 0)
    f = Fut()
    w.add(100, clock() + 3, f)
    w.ack(a, 100, 100, clock())
    assert f.result is None  # B may be elected and lacks it
    w.ack(b, 100, 100, clock())
    assert f.result == REPLICATED


def test_controlled_a_shrink_counts_only_once_the_controller_confirmed_it(clock: FakeClock) -> None:
    w = waiters(clock, controlled=True)
    w.confirm([A, B], 100)
    a = join(w, clock, 1, A, 100, 100)
    join(w, clock, 2, B, 100, 100)
    clock.advance(WINDOW + 1)
    w.ack(a, 100, 100, clock())  # A stays caught up; B, silent, leaves the master's set
    assert w.sync.members == {A} and w.sync.reported() == [A]
    f = Fut()
    w.add(200, clock() + 3, f)
    w.ack(a, 200, 200, clock())
    assert f.result is None  # the controller still lists B: B must hold it
    w.confirm([A], 200)  # the controller took the report
    assert f.result == REPLICATED


def test_controlled_a_confirmed_slave_that_disconnected_blocks_acks_until_confirmed_out(clock: FakeClock) -> None:
    w = waiters(clock, controlled=True)
    w.confirm([A, B], 100)
    a = join(w, clock, 1, A, 100, 100)
    join(w, clock, 2, B, 100, 100)
    assert w.disconnect(2, 100, clock())
    f = Fut()
    w.add(200, clock() + 3, f)
    w.ack(a, 200, 200, clock())
    assert f.result is None and w.can_wait(200)
    w.confirm([A], 200)
    assert f.result == REPLICATED


def test_controlled_a_reported_set_counts_until_the_controller_answers(clock: FakeClock) -> None:
    """B joins, is reported, and drops before the answer: the controller may be listing B now
    (it took the report), so B counts until an answer shows it gone."""
    w = waiters(clock, controlled=True)
    w.confirm([A], 100)
    a = join(w, clock, 1, A, 100, 100)
    join(w, clock, 2, B, 100, 100)
    assert w.sync.reporting() == [A, B]  # the heartbeat's body
    assert w.disconnect(2, 100, clock()) and w.sync.members == {A}
    f = Fut()
    w.add(200, clock() + 3, f)
    w.ack(a, 200, 200, clock())
    assert f.result is None and w.sync.effective() == {A, B}
    w.confirm([A, B], 200)  # the answer: the controller did take B
    assert f.result is None
    assert w.sync.reporting() == [A]  # the next heartbeat, out of turn
    w.confirm([A], 200)
    assert f.result == REPLICATED and w.sync.effective() == {A}


def test_without_a_controller_nothing_is_pending(clock: FakeClock) -> None:
    w = waiters(clock)
    join(w, clock, 1, A, 100, 100)
    assert w.sync.reporting() == [A] and not w.sync.pending
    assert w.disconnect(1, 100, clock()) and w.sync.effective() == set()


def test_controlled_in_sync_replicas_is_a_minimum_of_the_set(clock: FakeClock) -> None:
    w = waiters(clock, k=2, controlled=True)
    w.confirm([], 0)
    a = join(w, clock, 1, A, 100, 100)
    assert not w.can_wait(100) and w.replicated_offset(100) == 0
    b = join(w, clock, 2, B, 100, 100)
    assert w.can_wait(100)
    w.ack(a, 300, 300, clock())
    w.ack(b, 250, 300, clock())
    assert w.replicated_offset(300) == 250


def test_the_window_is_a_validated_broker_setting() -> None:
    assert BrokerConfig().ha_max_time_slave_not_catchup_seconds == 15.0
    assert BrokerConfig(ha_max_time_slave_not_catchup_seconds=2).ha_max_time_slave_not_catchup_seconds == 2.0
    with pytest.raises(ValueError, match="greater than 0"):
        BrokerConfig(ha_max_time_slave_not_catchup_seconds=0)
