"""The failover controller's pure parts (issue 32): election among the sync-state set, heartbeat
bookkeeping, the per-group decisions, the file state store. No sockets; a FakeClock."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.controller.core import MASTER, SLAVE, Controller, Heartbeat, MasterAlreadyAlive
from pymq.controller.election import elect
from pymq.controller.leases import Heartbeats
from pymq.controller.service import ControllerService
from pymq.controller.state import GroupState, Replica
from pymq.controller.store import FileStateStore
from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import ControllerAssignment, ControllerHeartbeatRequest
from pymq.testing import FakeClock

M, S1, S2 = "127.0.0.1:1000", "127.0.0.1:2000", "127.0.0.1:3000"


def group(*replicas: Replica, sync: set[str], master: str | None = None) -> GroupState:
    return GroupState("g", master, 1, set(sync), {r.address: r for r in replicas})


# --- election -------------------------------------------------------------------------------------


def test_only_the_sync_state_set_is_eligible() -> None:
    g = group(Replica(S1, 1, 100), Replica(S2, 1, 900), sync={S1})
    assert elect(g, {S1, S2}) == S1


def test_no_live_in_sync_replica_elects_nobody_unless_unclean() -> None:
    g = group(Replica(S1, 1, 100), Replica(S2, 1, 900), sync={S1})
    assert elect(g, {S2}) is None
    assert elect(g, {S2}, unclean=True) == S2
    assert elect(g, set(), unclean=True) is None


def test_unclean_still_prefers_an_in_sync_replica() -> None:
    g = group(Replica(S1, 1, 100), Replica(S2, 1, 900), sync={S1})
    assert elect(g, {S1, S2}, unclean=True) == S1


def test_higher_epoch_beats_larger_offset() -> None:
    g = group(Replica(S1, 2, 100), Replica(S2, 1, 900), sync={S1, S2})
    assert elect(g, {S1, S2}) == S1


def test_larger_offset_wins_at_equal_epochs() -> None:
    g = group(Replica(S1, 2, 100), Replica(S2, 2, 900), sync={S1, S2})
    assert elect(g, {S1, S2}) == S2


def test_priority_decides_at_equal_epoch_and_offset_then_the_lowest_address() -> None:
    g = group(Replica(S1, 2, 500, priority=0), Replica(S2, 2, 500, priority=5), sync={S1, S2})
    assert elect(g, {S1, S2}) == S2
    g = group(Replica(S2, 2, 500), Replica(S1, 2, 500), sync={S1, S2})
    assert elect(g, {S1, S2}) == S1


def test_dead_replicas_are_not_elected() -> None:
    g = group(Replica(S1, 3, 900), Replica(S2, 2, 100), sync={S1, S2})
    assert elect(g, {S2}) == S2
    assert elect(g, set()) is None


# --- heartbeats -------------------------------------------------------------------------------------


def test_heartbeats_lapse_after_the_timeout() -> None:
    clock = FakeClock()
    hb = Heartbeats(clock, 3.0)
    assert not hb.alive(M)
    hb.beat(M)
    clock.advance(2.999)
    assert hb.alive(M) and hb.alive_set() == {M}
    clock.advance(0.001)
    assert not hb.alive(M) and hb.alive_set() == set()
    hb.beat(M)
    hb.forget(M)
    assert not hb.alive(M)


# --- the controller's decisions --------------------------------------------------------------------


def beat(c: Controller, addr: str, *, master: bool = False, epoch: int = 0, offset: int = 0, **kw: object):  # type: ignore[no-untyped-def]
    return c.heartbeat(Heartbeat(group="g", address=addr, claims_master=master, epoch=epoch, max_offset=offset, **kw))  # type: ignore[arg-type]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctl(clock: FakeClock) -> Controller:
    return Controller(clock, master_timeout=3.0)


def test_a_new_groups_master_is_the_broker_configured_as_one(ctl: Controller) -> None:
    a = beat(ctl, S1)
    assert (a.role, a.master) == (SLAVE, None)  # a slave first: no master yet, nobody made master
    a = beat(ctl, M, master=True, epoch=4)
    assert (a.role, a.master, a.epoch, a.broker_id) == (MASTER, M, 4, 0)
    a = beat(ctl, S1)
    assert (a.role, a.master, a.epoch, a.broker_id) == (SLAVE, M, 4, 1)
    assert beat(ctl, S2).broker_id == 2
    assert beat(ctl, S1).broker_id == 1  # stable
    g = ctl.groups["g"]
    assert g.sync_set == {M} and ctl.dirty
    assert [(e.new_master, e.reason) for e in ctl.history] == [(M, "first master of a new group")]


def test_the_master_reports_the_sync_state_set_others_cannot(ctl: Controller) -> None:
    beat(ctl, M, master=True, epoch=1)
    beat(ctl, S1)
    a = beat(ctl, M, master=True, epoch=1, sync_set=[S1, "127.0.0.1:9"])  # an unknown address is dropped
    assert ctl.groups["g"].sync_set == {M, S1}
    assert a.sync_set == (S1,)  # the answer carries the controller's set (the master's slaves)
    beat(ctl, S1, sync_set=[])  # a slave's report: ignored
    beat(ctl, S2, master=True, epoch=9, sync_set=[])  # not the group's master: ignored, told SLAVE
    assert ctl.groups["g"].sync_set == {M, S1}
    a = beat(ctl, M, master=True, epoch=1, sync_set=[])  # the slave fell out
    assert ctl.groups["g"].sync_set == {M} and a.sync_set == ()


def test_a_sync_set_report_older_than_one_taken_is_ignored(ctl: Controller, clock: FakeClock) -> None:
    """A heartbeat delayed in the network (timed out at the master, delivered later over an old
    connection) must not bring back a slave the master has since dropped and stopped waiting for."""
    beat(ctl, M, master=True, epoch=1)
    beat(ctl, S1)
    beat(ctl, S2)
    beat(ctl, M, master=True, epoch=1, sync_set=[S1], sync_seq=10)
    a = beat(ctl, M, master=True, epoch=1, sync_set=[S2], sync_seq=12)
    assert ctl.groups["g"].sync_set == {M, S2} and a.sync_set == (S2,)
    a = beat(ctl, M, master=True, epoch=1, sync_set=[S1, S2], sync_seq=11)  # the delayed one
    assert ctl.groups["g"].sync_set == {M, S2} and a.sync_set == (S2,)
    beat(ctl, M, master=True, epoch=1, sync_set=[S1, S2], sync_seq=13)
    assert ctl.groups["g"].sync_set == {M, S1, S2}
    # a new master's reports are its own sequence: a lower number than the old master's is taken
    clock.advance(3.5)
    beat(ctl, S1, epoch=1, offset=10)
    beat(ctl, S2, epoch=1)
    assert [e.new_master for e in ctl.tick()] == [S1]
    beat(ctl, S1, master=True, epoch=2, sync_set=[S2], sync_seq=5)
    assert ctl.groups["g"].sync_set == {S1, S2}


def test_a_silent_master_is_replaced_by_an_in_sync_slave_with_a_new_epoch(ctl: Controller, clock: FakeClock) -> None:
    beat(ctl, M, master=True, epoch=1, offset=500)
    beat(ctl, S1, epoch=1, offset=500)
    beat(ctl, S2, epoch=1, offset=900)  # further on, but not in the set
    beat(ctl, M, master=True, epoch=1, offset=500, sync_set=[S1])
    clock.advance(2.0)
    beat(ctl, S1, epoch=1, offset=500)
    beat(ctl, S2, epoch=1, offset=900)
    assert ctl.tick() == []  # the master is still within its timeout
    clock.advance(1.0)
    [e] = ctl.tick()
    assert (e.old_master, e.new_master, e.epoch, e.reason) == (M, S1, 2, "master heartbeat lapsed")
    g = ctl.groups["g"]
    assert (g.master, g.epoch, g.sync_set) == (S1, 2, {S1})
    a = beat(ctl, S1, epoch=1, offset=500)
    assert (a.role, a.epoch, a.broker_id) == (MASTER, 2, 0)
    beat(ctl, S1, master=True, epoch=3, offset=500)  # promotion began a term above the one asked
    assert g.epoch == 3
    a = beat(ctl, S2, epoch=1)
    assert (a.role, a.master, a.epoch) == (SLAVE, S1, 3)
    # the old master comes back: a slave of the new one, with a slave id
    a = beat(ctl, M, master=True, epoch=1)
    assert (a.role, a.master) == (SLAVE, S1) and a.broker_id > 0
    assert ctl.tick() == []


def test_no_in_sync_replica_alive_leaves_the_group_without_a_master_until_one_returns(
    ctl: Controller, clock: FakeClock
) -> None:
    beat(ctl, M, master=True, epoch=1, offset=500)
    beat(ctl, S2, epoch=1, offset=400)  # never in sync
    clock.advance(3.0)
    beat(ctl, S2, epoch=1, offset=400)
    assert ctl.tick() == []
    g = ctl.groups["g"]
    assert g.master is None and g.sync_set == {M}
    a = beat(ctl, S2, epoch=1)
    assert (a.role, a.master) == (SLAVE, None)
    # the old master (in the set) comes back: it is elected again, at a new epoch
    beat(ctl, M, master=True, epoch=1, offset=500)
    [e] = ctl.tick()
    assert (e.new_master, e.epoch, e.reason) == (M, 2, "no master")
    assert beat(ctl, M, master=True, epoch=1).role == MASTER


def test_unclean_election_takes_a_live_replica_outside_the_set(clock: FakeClock) -> None:
    ctl = Controller(clock, master_timeout=3.0, unclean_election=True)
    beat(ctl, M, master=True, epoch=1)
    beat(ctl, S2, epoch=1)
    clock.advance(3.0)
    beat(ctl, S2, epoch=1)
    [e] = ctl.tick()
    assert e.new_master == S2


def test_a_second_master_starting_while_the_master_lives_is_refused(ctl: Controller, clock: FakeClock) -> None:
    beat(ctl, M, master=True, epoch=1)
    with pytest.raises(MasterAlreadyAlive, match=r"broker group g already has a live master at 127.0.0.1:1000"):
        beat(ctl, S1, master=True, starting=True)
    assert S1 not in ctl.groups["g"].replicas
    # a slave starting is welcome, and a master starting after the master lapsed is told SLAVE
    assert beat(ctl, S2, starting=True).role == SLAVE
    clock.advance(3.0)
    assert beat(ctl, S1, master=True, starting=True).role == SLAVE
    # the master itself restarting is not refused
    assert beat(ctl, M, master=True, epoch=1, starting=True).role == MASTER


def test_an_operator_election_moves_mastership_to_an_in_sync_slave(ctl: Controller) -> None:
    beat(ctl, M, master=True, epoch=1)
    beat(ctl, S1, epoch=1)
    assert ctl.elect("g", "operator", exclude=M) is None  # S1 is not in sync yet
    beat(ctl, M, master=True, epoch=1, sync_set=[S1])
    e = ctl.elect("g", "operator", exclude=M)
    assert e is not None and (e.new_master, e.epoch) == (S1, 2)


def test_an_operator_election_waits_out_the_masters_lease(clock: FakeClock) -> None:
    ctl = Controller(clock, master_timeout=3.0, lease=2.0)
    beat(ctl, M, master=True, epoch=1)
    beat(ctl, S1, epoch=1)
    beat(ctl, S2, epoch=1)
    with pytest.raises(ValueError, match="no other live replica in its sync-state set"):
        ctl.request_election("g")
    with pytest.raises(ValueError, match=r"127.0.0.1:3000 is not in g's sync-state set"):
        ctl.request_election("g", S2)
    with pytest.raises(ValueError, match="already the master"):
        ctl.request_election("g", M)
    with pytest.raises(ValueError, match="unknown broker group"):
        ctl.request_election("nope")
    beat(ctl, M, master=True, epoch=1, sync_set=[S1])  # MASTER granted at t0
    t0 = clock.now
    clock.advance(0.5)
    assert ctl.request_election("g") == t0 + 2.0
    # from now on the master's lease is not renewed
    a = beat(ctl, M, master=True, epoch=1, sync_set=[S1])
    assert (a.role, a.master) == (SLAVE, None)
    clock.advance(1.0)
    assert ctl.tick() == []  # its last lease still runs
    clock.advance(0.5)
    [e] = ctl.tick()
    assert (e.old_master, e.new_master, e.epoch, e.reason) == (M, S1, 2, "operator election")
    a = beat(ctl, M, master=True, epoch=1)
    assert (a.role, a.master) == (SLAVE, S1)
    assert beat(ctl, S1, epoch=1).role == MASTER


# --- state store ---------------------------------------------------------------------------------


def test_file_store_round_trips_and_replaces_atomically(tmp_path: Path, ctl: Controller) -> None:
    store = FileStateStore(tmp_path / "ctl")
    assert store.load() == {}
    beat(ctl, M, master=True, epoch=1, offset=10)
    beat(ctl, S1, epoch=1, offset=5)
    beat(ctl, M, master=True, epoch=1, sync_set=[S1])
    store.save(ctl.groups)
    store.save(ctl.groups)
    assert sorted(p.name for p in (tmp_path / "ctl").iterdir()) == ["controller.json"]
    loaded = store.load()
    assert loaded["g"].to_dict() == ctl.groups["g"].to_dict()
    assert (loaded["g"].master, loaded["g"].epoch, loaded["g"].sync_set) == (M, 1, {M, S1})


def test_the_lease_must_be_shorter_than_the_election_timeout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shorter than the election timeout"):
        ControllerService(FileStateStore(tmp_path), master_timeout=2.0, lease=2.0)


# --- the service's requests (handlers called directly, no sockets) ------------------------------


def hb_command(body: bytes = b"", **ext: object) -> Command:
    req = ControllerHeartbeatRequest(
        cluster_name="c", broker_name="g", broker_addr=M, role="MASTER", epoch=1, max_offset=10
    ).to_ext()
    return Command.request(RequestCode.CONTROLLER_HEARTBEAT, {**req, **ext}, body)


async def test_service_answers_assignments_and_saves_before_answering(tmp_path: Path, clock: FakeClock) -> None:
    store = FileStateStore(tmp_path)
    svc = ControllerService(store, master_timeout=3.0, lease=2.0, clock=clock)
    resp = await svc.heartbeat(hb_command(), None)
    a = ControllerAssignment.from_ext(resp.ext)
    assert (resp.code, a.role, a.master_addr, a.lease_ms) == (ResponseCode.SUCCESS, "MASTER", M, 2000)
    assert store.load()["g"].master == M
    refused = await svc.heartbeat(hb_command(brokerAddr=S1, starting="true"), None)
    assert refused.code == ResponseCode.NO_PERMISSION and "already has a live master" in (refused.remark or "")
    await svc.heartbeat(hb_command(brokerAddr=S1, role="SLAVE"), None)
    await svc.heartbeat(hb_command(brokerAddr=S2, role="SLAVE"), None)
    resp = await svc.heartbeat(hb_command(encode_body({"syncSet": [S2, S1]})), None)
    assert ControllerAssignment.from_ext(resp.ext).sync_state_set == f"{S1},{S2}"  # what the master must count


async def test_service_names_the_bad_field(tmp_path: Path) -> None:
    svc = ControllerService(FileStateStore(tmp_path), master_timeout=3.0, lease=2.0)
    with pytest.raises(InvalidRequestError, match="syncSet"):
        await svc.heartbeat(hb_command(encode_body({"syncSet": "x"})), None)
    with pytest.raises(InvalidRequestError, match="syncSetSeq"):
        await svc.heartbeat(hb_command(encode_body({"syncSet": [], "syncSetSeq": "7"})), None)
    with pytest.raises(InvalidRequestError, match="epoch"):
        await svc.heartbeat(hb_command(epoch="-3"), None)
    with pytest.raises(InvalidRequestError, match="clusterName"):
        bad = Command.request(RequestCode.CONTROLLER_HEARTBEAT, {"brokerName": "g", "role": "MASTER"})
        await svc.heartbeat(bad, None)
