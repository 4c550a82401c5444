"""The controller's decisions: heartbeats in, role assignments and elections out. Pure.

A broker heartbeats with its role, epoch and max offset (a master adds its in-sync slaves).
The answer is its assignment: MASTER (it holds the group's mastership, and a lease on it, at
``epoch``) or SLAVE of ``master``. :meth:`Controller.tick` elects a new master for every group
whose master has been silent for ``master_timeout`` (see :mod:`.election`), bumping the epoch.
A broker that starts as a master while its group's master is alive is refused
(:class:`MasterAlreadyAlive`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pymq.controller.election import elect
from pymq.controller.leases import Heartbeats
from pymq.controller.state import GroupState, Replica

log = logging.getLogger("pymq.controller")

MASTER = "MASTER"
SLAVE = "SLAVE"


@dataclass(slots=True, kw_only=True)
class Heartbeat:
    """What a broker tells the controller."""

    group: str
    address: str
    #: the broker thinks it is its group's master (MASTER or FENCED)
    claims_master: bool
    epoch: int
    max_offset: int
    priority: int = 0
    #: a master's in-sync slaves (addresses); None from a slave
    sync_set: list[str] | None = None
    #: the report's sequence number, increasing per master (a report older than one taken is stale)
    sync_seq: int | None = None
    #: the broker's first heartbeat, before it serves
    starting: bool = False


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the broker is to be: MASTER at ``epoch``, or SLAVE of ``master`` (None: no master yet)."""

    role: str
    master: str | None
    epoch: int
    broker_id: int
    #: MASTER: the slaves of the group's sync-state set (what the master must count)
    sync_set: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Election:
    group: str
    old_master: str | None
    new_master: str | None
    epoch: int
    reason: str


class MasterAlreadyAlive(Exception):
    """A broker started as master while its group's master is alive."""


@dataclass
class Controller:
    """Per-group state plus heartbeats; ``dirty`` is set whenever the durable state changed."""

    clock: Callable[[], float]
    master_timeout: float
    unclean_election: bool = False
    #: how long a MASTER answer lets the master take writes (an operator election waits it out)
    lease: float = 0.0
    groups: dict[str, GroupState] = field(default_factory=dict)
    dirty: bool = False
    history: list[Election] = field(default_factory=list)
    #: elections per group since this controller started (metrics)
    election_counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.heartbeats = Heartbeats(self.clock, self.master_timeout)
        #: master address -> when it was last told MASTER (its lease runs from before then)
        self.granted: dict[str, float] = {}
        #: group -> (the replica asked for or None, not before this time): operator elections
        #: waiting for the current master's lease to lapse
        self.handovers: dict[str, tuple[str | None, float]] = {}
        #: no election for a lapsed heartbeat before this time (a controller that just took over
        #: has heard no one yet: see :meth:`take_over`)
        self.grace_until = float("-inf")
        #: group -> (master, sequence number) of the last sync-state set report taken
        self.sync_seqs: dict[str, tuple[str, int]] = {}
        if self.unclean_election:
            log.warning("unclean election is ON: a replica outside the sync-state set may be elected and lose writes")

    def take_over(self, groups: dict[str, GroupState], grace: float) -> None:
        """Start deciding from ``groups`` (loaded from the store): everything heard before is
        forgotten, and no replica is declared dead before ``grace`` seconds (at least the master
        timeout) have passed, so that every live master has had a full timeout to check in."""
        self.groups = groups
        self.dirty = False
        self.heartbeats.last.clear()
        self.granted.clear()
        self.handovers.clear()
        self.grace_until = self.clock() + max(grace, self.master_timeout)

    def in_grace(self) -> bool:
        return self.clock() < self.grace_until

    def heartbeat(self, hb: Heartbeat) -> Assignment:
        """Record ``hb`` and answer the broker's assignment (raises MasterAlreadyAlive)."""
        g = self.groups.get(hb.group)
        if g is None:
            g = self.groups[hb.group] = GroupState(hb.group)
            self.dirty = True
        master_alive = g.master is not None and g.master != hb.address and self.heartbeats.alive(g.master)
        if hb.starting and hb.claims_master and master_alive:
            raise MasterAlreadyAlive(
                f"broker group {hb.group} already has a live master at {g.master} (epoch {g.epoch}); "
                f"start this broker as a slave (--role SLAVE)"
            )
        rep = g.replicas.get(hb.address)
        if rep is None:
            rep = g.replicas[hb.address] = Replica(hb.address)
            self.dirty = True
        rep.epoch, rep.max_offset, rep.priority = hb.epoch, hb.max_offset, hb.priority
        self.heartbeats.beat(hb.address)
        if g.master is None and hb.claims_master and not g.sync_set:
            # a new group: its first master is the broker configured as one
            self._make_master(g, hb.address, max(g.epoch, hb.epoch), "first master of a new group")
        if g.master == hb.address and hb.group in self.handovers:
            return Assignment(SLAVE, None, g.epoch, 0)  # no lease renewal: the mastership is moving
        if g.master == hb.address:
            if hb.epoch > g.epoch:
                g.epoch = hb.epoch  # the promotion began a term above the one asked for
                self.dirty = True
            if hb.sync_set is not None and hb.claims_master and hb.epoch >= g.epoch and self._fresh(hb):
                reported = {hb.address} | {a for a in hb.sync_set if a in g.replicas}
                if reported != g.sync_set:
                    log.info("sync_set_changed group=%s old=%s new=%s", g.name, sorted(g.sync_set), sorted(reported))
                    g.sync_set = reported
                    self.dirty = True
            rep.broker_id = 0
            self.granted[hb.address] = self.clock()
            return Assignment(MASTER, hb.address, g.epoch, 0, tuple(sorted(g.sync_set - {hb.address})))
        if rep.broker_id <= 0:
            rep.broker_id = -1
            g.slave_id(hb.address)
            self.dirty = True
        return Assignment(SLAVE, g.master, g.epoch, rep.broker_id)

    def _fresh(self, hb: Heartbeat) -> bool:
        """Whether ``hb``'s sync-state set report is newer than the last one taken from its master (a
        report delayed in the network, arriving after a later one, must not undo it)."""
        if hb.sync_seq is None:
            return True
        last = self.sync_seqs.get(hb.group)
        if last is not None and last[0] == hb.address and hb.sync_seq <= last[1]:
            log.info(
                "stale_sync_set_report group=%s master=%s seq=%d last=%d", hb.group, hb.address, hb.sync_seq, last[1]
            )
            return False
        self.sync_seqs[hb.group] = (hb.address, hb.sync_seq)
        return True

    def request_election(self, group: str, target: str | None = None) -> float:
        """An operator's election: move ``group``'s mastership to ``target`` (or the best other in-sync
        replica) once the master's lease has lapsed; returns that time. Raises ValueError (why not)."""
        g = self.groups.get(group)
        if g is None:
            raise ValueError(f"unknown broker group {group!r}")
        alive = self.heartbeats.alive_set() - ({g.master} if g.master else set())
        if target is not None:
            if target == g.master:
                raise ValueError(f"{target} is already the master of {group}")
            if target not in g.sync_set:
                raise ValueError(f"{target} is not in {group}'s sync-state set {sorted(g.sync_set)}")
            if target not in alive:
                raise ValueError(f"{target} is not alive")
        elif elect(g, alive) is None:
            raise ValueError(f"{group} has no other live replica in its sync-state set {sorted(g.sync_set)}")
        granted = self.granted.get(g.master, self.clock()) if g.master else self.clock()
        not_before = max(self.clock(), granted + self.lease)
        self.handovers[group] = (target, not_before)
        log.warning("election_requested group=%s target=%s at=%.3f", group, target, not_before)
        return not_before

    def tick(self) -> list[Election]:
        """Elect a master for every group whose master is silent (or missing), and carry out the
        operator elections whose wait is over."""
        out = []
        now = self.clock()
        for name, (target, not_before) in list(self.handovers.items()):
            if now < not_before:
                continue
            del self.handovers[name]
            g = self.groups[name]
            if target is not None and target in g.sync_set and self.heartbeats.alive(target):
                out.append(self._make_master(g, target, g.epoch + 1, "operator election", g.master))
            else:
                e = self.elect(name, "operator election", exclude=g.master)
                if e is not None:
                    out.append(e)
        if now < self.grace_until:
            return out  # just took over: the silent have not had a full timeout to check in yet
        for g in self.groups.values():
            if g.master is not None and self.heartbeats.alive(g.master):
                continue
            if g.master is None and not g.sync_set:
                continue  # never had a master
            reason = "master heartbeat lapsed" if g.master is not None else "no master"
            old = g.master
            e = self.elect(g.name, reason, exclude=old)
            if e is not None:
                out.append(e)
            elif old is not None and g.master == old:
                log.error("no_eligible_replica group=%s sync_set=%s", g.name, sorted(g.sync_set))
                g.master = None  # the sync-state set stays: its members remain the only eligible ones
                self.dirty = True
        return out

    def elect(self, group: str, reason: str, *, exclude: str | None = None) -> Election | None:
        """Elect ``group``'s master now among its live in-sync replicas (``exclude`` not eligible);
        None (and nothing changed) when no replica is eligible."""
        g = self.groups[group]
        alive = self.heartbeats.alive_set() - ({exclude} if exclude else set())
        winner = elect(g, alive, unclean=self.unclean_election)
        old = g.master
        if winner is None or winner == old:
            return None
        e = self._make_master(g, winner, g.epoch + 1, reason, old)
        return e

    def _make_master(self, g: GroupState, address: str, epoch: int, reason: str, old: str | None = None) -> Election:
        g.master = address
        g.epoch = epoch
        g.sync_set = {address}
        g.replicas[address].broker_id = 0
        self.dirty = True
        e = Election(g.name, old, address, epoch, reason)
        self.history.append(e)
        del self.history[:-100]
        self.election_counts[g.name] = self.election_counts.get(g.name, 0) + 1
        log.warning("master_elected group=%s master=%s epoch=%d old=%s reason=%s", g.name, address, epoch, old, reason)
        return e


__all__ = ["MASTER", "SLAVE", "Assignment", "Controller", "Election", "Heartbeat", "MasterAlreadyAlive"]
