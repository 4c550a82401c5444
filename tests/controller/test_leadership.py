"""Several controllers, one active (issue 32): the campaign's pure decisions (:class:`Leadership`),
the grace after a takeover (:meth:`Controller.take_over`), and two :class:`ControllerService` s
campaigning in an in-memory etcd (leases expire on a FakeClock). No sockets."""

from __future__ import annotations

from typing import Any

import pytest

from pymq.controller.core import MASTER, SLAVE, Controller, Heartbeat
from pymq.controller.etcd_campaign import CampaignResult
from pymq.controller.etcd_store import StateConflict
from pymq.controller.leadership import ACTIVE, ACTIVE_CONTROLLER, STANDBY, Leadership
from pymq.controller.service import ControllerService
from pymq.controller.state import GroupState
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import ControllerAssignment, ControllerElectRequest, ControllerHeartbeatRequest
from pymq.testing import FakeClock

A, B = "127.0.0.1:9876", "127.0.0.1:9877"
M, S1 = "127.0.0.1:1000", "127.0.0.1:2000"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --- Leadership -----------------------------------------------------------------------------------


def test_active_from_the_won_campaign_until_the_lease_lapses_locally(clock: FakeClock) -> None:
    lead = Leadership(clock, A)
    assert not lead.active() and lead.role == STANDBY and not lead.must_step_down()
    sent = clock()
    clock.advance(0.3)  # the grant and the campaign took this long: the lease counts from sending
    lead.won(sent, 2.0)
    assert lead.active() and lead.role == ACTIVE and lead.leader == A
    clock.advance(1.69)
    assert lead.active()
    clock.advance(0.01)
    assert not lead.active() and lead.must_step_down()
    lead.step_down()
    assert not lead.must_step_down() and lead.leader is None


def test_a_keepalive_extends_from_its_sending_time_and_never_shortens(clock: FakeClock) -> None:
    lead = Leadership(clock, A)
    t0 = clock()
    lead.won(t0, 2.0)
    clock.advance(1.0)
    lead.renewed(clock() - 0.5, 2.0)  # sent half a second ago
    assert lead.deadline == pytest.approx(t0 + 2.5)
    lead.renewed(clock() - 1.0, 2.0)  # an older answer arriving late: no shortening
    assert lead.deadline == pytest.approx(t0 + 2.5)
    lead.renewed(clock(), 0.0)  # etcd says the lease is gone
    assert not lead.active() and not lead.must_step_down() and lead.leader is None


def test_a_keepalive_does_not_make_a_standby_active(clock: FakeClock) -> None:
    lead = Leadership(clock, A)
    lead.renewed(clock(), 5.0)
    assert not lead.active()


def test_a_standby_names_the_active_controller(clock: FakeClock) -> None:
    lead = Leadership(clock, B)
    assert "no active controller known" in lead.refusal()
    lead.lost(A)
    assert lead.refusal() == f"standby controller {B}: the active controller is {A}"
    lead.lost(B)  # its own stale key: not named as active
    assert lead.leader is None


# --- the grace after a takeover --------------------------------------------------------------------


def beat(c: Controller, addr: str, *, master: bool = False, epoch: int = 1, sync: list[str] | None = None) -> Any:
    return c.heartbeat(Heartbeat(group="g", address=addr, claims_master=master, epoch=epoch, max_offset=10,
                                 sync_set=sync))  # fmt: skip


def stored_group() -> dict[str, GroupState]:
    old = Controller(FakeClock(), master_timeout=3.0)
    beat(old, M, master=True)
    beat(old, S1)
    beat(old, M, master=True, sync=[S1])
    return {n: GroupState.from_dict(g.to_dict()) for n, g in old.groups.items()}


def test_a_new_controller_declares_no_one_dead_for_a_full_master_timeout(clock: FakeClock) -> None:
    ctl = Controller(clock, master_timeout=3.0)
    ctl.take_over(stored_group(), grace=0.0)  # grace is at least the master timeout
    assert ctl.in_grace()
    beat(ctl, S1)  # only the slave has checked in so far
    clock.advance(2.9)
    beat(ctl, S1)
    assert ctl.tick() == [] and ctl.groups["g"].master == M
    clock.advance(0.1)
    assert not ctl.in_grace()
    [e] = ctl.tick()  # the master never checked in: a full timeout has passed, the slave is elected
    assert (e.old_master, e.new_master, e.epoch, e.reason) == (M, S1, 2, "master heartbeat lapsed")


def test_a_master_checking_in_during_the_grace_keeps_its_mastership(clock: FakeClock) -> None:
    ctl = Controller(clock, master_timeout=3.0)
    ctl.take_over(stored_group(), grace=3.0)
    clock.advance(2.5)
    a = beat(ctl, M, master=True, sync=[S1])
    assert (a.role, a.epoch) == (MASTER, 1)
    assert beat(ctl, S1).role == SLAVE
    clock.advance(1.0)
    assert ctl.tick() == [] and ctl.groups["g"].master == M


def test_a_takeover_forgets_what_a_previous_term_heard(clock: FakeClock) -> None:
    ctl = Controller(clock, master_timeout=3.0)
    beat(ctl, "127.0.0.1:7", master=True)
    ctl.take_over(stored_group(), grace=3.0)
    assert ctl.heartbeats.alive_set() == set() and ctl.granted == {} and not ctl.dirty
    assert set(ctl.groups["g"].replicas) == {M, S1}


# --- two services campaigning in an in-memory etcd -----------------------------------------------------


class FakeEtcd:
    """Leases expiring on the clock, one leadership key, one state value with a revision."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.leases: dict[int, float] = {}  # id -> expiry
        self.holder: tuple[str, int] | None = None  # (address, lease)
        self.state: dict[str, Any] = {}
        self.revision = 0
        self.next_id = 1

    def expire(self) -> None:
        now = self.clock()
        for lease, at in list(self.leases.items()):
            if at <= now:
                del self.leases[lease]
        if self.holder is not None and self.holder[1] not in self.leases:
            self.holder = None


class FakeCampaign:
    def __init__(self, etcd: FakeEtcd, ttl: int = 2) -> None:
        self.etcd, self.ttl, self.me, self.lease, self.key = etcd, ttl, "", 0, b"/leader"

    def grant(self) -> float:
        self.lease, self.etcd.next_id = self.etcd.next_id, self.etcd.next_id + 1
        self.etcd.leases[self.lease] = self.etcd.clock() + self.ttl
        return float(self.ttl)

    def keepalive(self) -> float:
        self.etcd.expire()
        if self.lease not in self.etcd.leases:
            self.lease = 0
            return 0.0
        self.etcd.leases[self.lease] = self.etcd.clock() + self.ttl
        return float(self.ttl)

    def campaign(self) -> CampaignResult:
        assert self.lease, "campaigned without a lease"
        self.etcd.expire()
        if self.etcd.holder is None:
            self.etcd.holder = (self.me, self.lease)
        addr, lease = self.etcd.holder
        return CampaignResult(lease == self.lease, addr)

    def resign(self) -> None:
        self.etcd.leases.pop(self.lease, None)
        self.lease = 0
        self.etcd.expire()


class FakeStore:
    """The state compared on its revision, as :class:`EtcdStateStore` does."""

    def __init__(self, etcd: FakeEtcd) -> None:
        self.etcd, self.revision = etcd, 0

    def load(self) -> dict[str, GroupState]:
        self.revision = self.etcd.revision
        return {n: GroupState.from_dict(d) for n, d in self.etcd.state.items()}

    def save(self, groups: dict[str, GroupState]) -> None:
        if self.revision != self.etcd.revision:
            raise StateConflict(f"the controller state in etcd changed since revision {self.revision}")
        self.etcd.state = {n: g.to_dict() for n, g in groups.items()}
        self.etcd.revision = self.revision = self.etcd.revision + 1


def service(etcd: FakeEtcd, clock: FakeClock) -> ControllerService:
    svc = ControllerService(FakeStore(etcd), master_timeout=3.0, lease=2.0, clock=clock,
                            campaign=FakeCampaign(etcd))  # type: ignore[arg-type]  # fmt: skip
    svc.leadership = Leadership(clock, "")
    return svc


def named(svc: ControllerService, addr: str) -> ControllerService:
    assert svc.leadership is not None and svc.campaign is not None
    svc.leadership.me = svc.campaign.me = addr
    return svc


def hb(addr: str, role: str = "SLAVE", sync: list[str] | None = None) -> Command:
    ext = ControllerHeartbeatRequest(cluster_name="c", broker_name="g", broker_addr=addr, role=role, epoch=1,
                                     max_offset=10).to_ext()  # fmt: skip
    body = encode_body({"syncSet": sync}) if sync is not None else b""
    return Command.request(RequestCode.CONTROLLER_HEARTBEAT, ext, body)


async def status(svc: ControllerService) -> dict[str, Any]:
    resp = svc.status(Command.request(RequestCode.CONTROLLER_STATUS), None)
    out: dict[str, Any] = decode_body(resp.body)
    return out


async def test_one_active_the_standby_refuses_and_names_it_and_takes_over_after_the_lease(clock: FakeClock) -> None:
    etcd = FakeEtcd(clock)
    a, b = named(service(etcd, clock), A), named(service(etcd, clock), B)
    await a._campaign_round()
    await b._campaign_round()
    assert a.active() and not b.active()
    assert ((await status(a))["role"], (await status(b))["role"]) == (ACTIVE, STANDBY)
    assert (await status(b))[ACTIVE_CONTROLLER] == A

    ok = await a.heartbeat(hb(M, "MASTER"), None)
    assert ControllerAssignment.from_ext(ok.ext).role == MASTER
    await a.heartbeat(hb(S1), None)
    await a.heartbeat(hb(M, "MASTER", sync=[S1]), None)
    refused = await b.heartbeat(hb(M, "MASTER"), None)
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert refused.ext[ACTIVE_CONTROLLER] == A
    assert refused.remark == f"standby controller {B}: the active controller is {A}"
    elect = Command.request(RequestCode.CONTROLLER_ELECT_MASTER, ControllerElectRequest(broker_name="g").to_ext())
    assert (await b.elect_master(elect, None)).code == ResponseCode.SERVICE_NOT_AVAILABLE

    # A dies (no more keepalives): B keeps campaigning; it wins only once etcd expired A's lease
    clock.advance(1.0)
    await b._campaign_round()
    assert not b.active()
    clock.advance(1.0)
    await b._campaign_round()
    assert b.active() and b.core.in_grace()
    assert b.core.groups["g"].master == M and b.core.groups["g"].sync_set == {M, S1}  # loaded from etcd
    assert not a.active()  # A's own deadline (counted from its sending) passed before etcd's
    # no election during the grace (a full master timeout), though the master has not been heard
    for step in (1.0, 1.0, 0.9):
        clock.advance(step)
        await b._campaign_round()  # keepalives: B stays active
        await b.heartbeat(hb(S1), None)
        assert await b.tick() == []
    clock.advance(0.2)
    await b.heartbeat(hb(S1), None)
    [e] = await b.tick()
    assert (e.new_master, e.epoch) == (S1, 2) and etcd.state["g"]["master"] == S1


async def test_a_deposed_controller_gets_a_conflict_and_steps_down(clock: FakeClock) -> None:
    etcd = FakeEtcd(clock)
    a, b = named(service(etcd, clock), A), named(service(etcd, clock), B)
    await a._campaign_round()
    await a.heartbeat(hb(M, "MASTER"), None)
    # A's process stalls past its lease; B takes over and decides
    clock.advance(2.5)
    await b._campaign_round()
    assert b.active()
    await b.heartbeat(hb(S1), None)
    assert etcd.revision == 2
    # A resumes believing its last keepalive (as if renewed): its next save is refused, it steps down
    assert a.leadership is not None
    a.leadership.deadline = clock() + 5
    refused = await a.heartbeat(hb("127.0.0.1:3000"), None)
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and not a.active()
    assert a.core.groups == {} and a.campaign is not None and a.campaign.lease == 0
    assert etcd.holder == (B, b.campaign.lease)  # type: ignore[union-attr]  # B's key untouched
    await a._campaign_round()
    assert not a.active() and (await status(a))[ACTIVE_CONTROLLER] == B


async def test_the_active_controller_steps_down_when_keepalives_fail_for_its_lease(clock: FakeClock) -> None:
    etcd = FakeEtcd(clock)
    a = named(service(etcd, clock), A)
    await a._campaign_round()
    assert a.active()
    clock.advance(1.0)
    await a._campaign_round()  # renewed
    clock.advance(2.5)
    assert a.leadership is not None and a.leadership.must_step_down() and not a.active()
    assert (await a.heartbeat(hb(M, "MASTER"), None)).code == ResponseCode.SERVICE_NOT_AVAILABLE


# --- the broker's side: ControllerLink moves on to the controller a standby names ------------------


class ScriptedRpc:
    """Answers CONTROLLER_HEARTBEAT per address: a standby's refusal naming ``active``, or MASTER."""

    def __init__(self, active: str, dead: set[str]) -> None:
        self.active, self.dead, self.calls = active, dead, []  # type: ignore[var-annotated]

    async def invoke(self, addr: str, cmd: Command, timeout: float) -> Command:
        self.calls.append(addr)
        if addr in self.dead:
            raise OSError("connection refused")
        if addr != self.active:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "standby", {ACTIVE_CONTROLLER: self.active})
        assignment = ControllerAssignment(role="MASTER", master_addr=M, epoch=1, broker_id=0, lease_ms=800)
        return cmd.response(ext=assignment.to_ext())


def link(addrs: list[str], rpc: ScriptedRpc) -> Any:
    from types import SimpleNamespace

    from pymq.broker.role.controlled import ControllerLink
    from pymq.broker.role.state import RoleState

    config = SimpleNamespace(controller_addrs=addrs, namesrv_addrs=[], controller_heartbeat_seconds=0.2,
                             cluster_name="c", broker_name="g", controller_priority=0)  # fmt: skip
    role = SimpleNamespace(current=SimpleNamespace(state=RoleState.SLAVE, epoch=1))
    changer = SimpleNamespace(host=SimpleNamespace(role=role, replication=None))
    return ControllerLink(config, rpc, changer, address=lambda: M, max_offset=lambda: 0, sync_set=list)  # type: ignore[arg-type]


async def test_the_broker_goes_to_the_controller_a_standby_names_and_stays_with_it() -> None:
    n1, n2, n3 = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
    rpc = ScriptedRpc(active=n3, dead=set())
    lnk = link([n1, n2, n3], rpc)
    a = await lnk._beat(starting=True)
    assert a is not None and a.role == "MASTER"
    assert rpc.calls == [n1, n3]  # n1 named n3: n2 was skipped
    assert lnk.addrs[0] == n3
    rpc.calls.clear()
    await lnk._beat(starting=True)
    assert rpc.calls == [n3]
    # the active controller dies; n1 takes over: n3 fails, n1 answers, n1 is asked first afterwards
    rpc.active, rpc.dead = n1, {n3}
    rpc.calls.clear()
    await lnk._beat(starting=True)
    assert rpc.calls == [n3, n1] and lnk.addrs[0] == n1


# --- configuration --------------------------------------------------------------------------------


def test_the_etcd_controller_settings_are_validated() -> None:
    from pydantic import ValidationError

    from pymq.config import NamesrvConfig

    cfg = NamesrvConfig(controller="etcd", controller_etcd_lease_seconds=2, controller_address="10.0.0.1:9876")
    assert (cfg.controller_etcd_lease_seconds, cfg.controller_etcd_leader_key) == (2, "/pymq/controller/leader")
    assert NamesrvConfig().controller_etcd_lease_seconds == 5
    with pytest.raises(ValidationError, match="controller_etcd_lease_seconds"):
        NamesrvConfig(controller_etcd_lease_seconds=0)
    with pytest.raises(ValidationError, match="controller_etcd_endpoints"):
        NamesrvConfig(controller="etcd", controller_etcd_endpoints=[])
