"""The controller's RPC face, embedded in a nameserver (``pymq-namesrv --controller embedded|etcd``).

It answers CONTROLLER_HEARTBEAT with the broker's assignment and CONTROLLER_STATUS with every
group's state, runs :meth:`Controller.tick` a few times a second, saves the state through its
:class:`StateStore` whenever it changed (before answering; the store's blocking I/O runs in a
thread), and tells its owner of every election (``on_election``: the nameserver drops the old
master's routes at once).

With a ``campaign`` (etcd), several controllers run and one is active (:mod:`.leadership`): a
standby answers heartbeats and elections with SERVICE_NOT_AVAILABLE naming the active
controller (ext ``activeController``), and its status says so. On winning the campaign a
controller loads the state from etcd and takes over with a grace of a full master timeout
(:meth:`Controller.take_over`); its lease lapsing, or a save refused (:class:`StateConflict`:
another controller decided, or it lost the key), makes it step down and campaign again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pymq.controller.core import Controller, Election, Heartbeat, MasterAlreadyAlive
from pymq.controller.etcd_campaign import EtcdCampaign
from pymq.controller.etcd_store import EtcdStateStore, StateConflict
from pymq.controller.leadership import ACTIVE, ACTIVE_CONTROLLER, Leadership
from pymq.controller.state import GroupState
from pymq.controller.store import StateStore
from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import ControllerAssignment, ControllerElectRequest, ControllerHeartbeatRequest

log = logging.getLogger("pymq.controller")

MASTER_STATES = frozenset({"MASTER", "FENCED"})


class ControllerService:
    """A controller over ``store``; ``start()`` loads the state (or campaigns) and begins ticking."""

    def __init__(
        self,
        store: StateStore,
        *,
        master_timeout: float,
        lease: float,
        unclean_election: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_election: Callable[[Election], None] | None = None,
        campaign: EtcdCampaign | None = None,
    ) -> None:
        if lease >= master_timeout:
            raise ValueError("the master lease must be shorter than the election timeout")
        self.store = store
        self.lease = lease
        self.core = Controller(clock, master_timeout, unclean_election, lease=lease)
        self.on_election = on_election
        self.campaign = campaign
        #: who is active (None: a single controller, always active)
        self.leadership: Leadership | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._save_lock = asyncio.Lock()

    def table(self) -> dict[int, Any]:
        return {
            RequestCode.CONTROLLER_HEARTBEAT: self.heartbeat,
            RequestCode.CONTROLLER_STATUS: self.status,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
        }

    @property
    def address(self) -> str:
        return self.leadership.me if self.leadership is not None else ""

    def active(self) -> bool:
        return self.leadership is None or self.leadership.active()

    async def start(self, address: str = "") -> None:
        """Load the state and serve (one controller), or campaign as ``address`` (several)."""
        if self.campaign is None:
            groups = await asyncio.to_thread(self.store.load)
            # A restarted controller has heard no one yet: masters get two timeouts to check in
            # (their clients may be backing off from the address that was down).
            self.core.take_over(groups, 2 * self.core.master_timeout)
            log.info("controller_started groups=%d", len(self.core.groups))
        else:
            self.campaign.me = address
            self.leadership = Leadership(self.core.clock, address)
            self._tasks.append(asyncio.create_task(self._campaign_loop(), name="controller-campaign"))
            log.info("controller_campaigning address=%s", address)
        self._tasks.append(asyncio.create_task(self._tick_loop(), name="controller-tick"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks = []
        if self.campaign is not None and self.campaign.lease:
            try:  # the next controller need not wait for the lease to expire
                await asyncio.to_thread(self.campaign.resign)
            except Exception as exc:
                log.warning("controller_resign_failed reason=%s", exc)

    async def _tick_loop(self) -> None:
        interval = min(0.2, self.core.master_timeout / 5)
        while True:
            await asyncio.sleep(interval)
            try:
                if self.active():
                    await self.tick()
            except Exception:  # a state store that fails (etcd down, a conflict): decide nothing, retry
                log.exception("controller_tick_failed")

    async def tick(self) -> list[Election]:
        elections = self.core.tick()
        await self._save()
        for e in elections:
            if self.on_election is not None:
                self.on_election(e)
        return elections

    async def _save(self) -> None:
        async with self._save_lock:
            if not self.core.dirty:
                return
            self.core.dirty = False
            # a copy: the event loop goes on changing the live state while the thread writes
            snapshot = {n: GroupState.from_dict(g.to_dict()) for n, g in self.core.groups.items()}
            try:
                await asyncio.to_thread(self.store.save, snapshot)
            except StateConflict as exc:
                if self.leadership is not None:
                    await self._step_down(str(exc))
                raise
            except BaseException:
                self.core.dirty = True
                raise

    # --- the campaign (several controllers on etcd) ----------------------------------------------

    async def _campaign_loop(self) -> None:
        assert self.campaign is not None and self.leadership is not None
        period = max(0.1, min(1.0, self.campaign.ttl / 4))
        while True:
            pause = period
            try:
                await self._campaign_round()
            except Exception as exc:  # etcd unreachable (or electing its leader): try again soon
                log.warning("controller_campaign_failed reason=%s", exc)
                pause = min(period, 0.1)
            if self.leadership.must_step_down():
                await self._step_down("the leadership lease lapsed (etcd not answering keepalives)")
            await asyncio.sleep(pause)

    async def _campaign_round(self) -> None:
        camp, lead, clock = self.campaign, self.leadership, self.core.clock
        assert camp is not None and lead is not None
        sent = clock()
        ttl = await asyncio.to_thread(camp.keepalive) if camp.lease else 0.0
        if lead.active():
            lead.renewed(sent, ttl)
            if ttl <= 0:
                await self._step_down("the leadership lease expired in etcd")
            return
        if ttl <= 0 or not camp.lease:  # (a step-down may have revoked it meanwhile)
            sent = clock()
            ttl = await asyncio.to_thread(camp.grant)
        result = await asyncio.to_thread(camp.campaign)
        if not result.won:
            if result.leader != lead.leader:
                log.info("controller_standby active=%s", result.leader)
            lead.lost(result.leader)
            return
        groups = await asyncio.to_thread(self.store.load)
        if isinstance(self.store, EtcdStateStore):
            self.store.fence = (camp.key, camp.lease)
        self.core.take_over(groups, self.core.master_timeout)
        lead.won(sent, ttl)
        log.warning(
            "controller_took_over address=%s groups=%d grace=%.1fs", lead.me, len(groups), self.core.master_timeout
        )

    async def _step_down(self, reason: str) -> None:
        lead, camp = self.leadership, self.campaign
        assert lead is not None and camp is not None
        was = lead.deadline > 0
        lead.step_down()
        self.core.take_over({}, 0.0)
        if isinstance(self.store, EtcdStateStore):
            self.store.fence = None
        if was:
            log.warning("controller_stepped_down address=%s reason=%s", lead.me, reason)
        try:
            await asyncio.to_thread(camp.resign)
        except Exception as exc:  # the lease expires by itself
            log.warning("controller_resign_failed reason=%s", exc)

    def _refuse(self, cmd: Command) -> Command:
        assert self.leadership is not None
        leader = self.leadership.leader
        ext = {ACTIVE_CONTROLLER: leader} if leader and leader != self.leadership.me else None
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, self.leadership.refusal(), ext)

    async def heartbeat(self, cmd: Command, channel: object) -> Command:
        h = ControllerHeartbeatRequest.from_ext(cmd.ext)
        sync_set = None
        sync_seq = None
        if len(cmd.body):
            body = decode_body(cmd.body, "heartbeat body")
            raw = body.get("syncSet") if isinstance(body, dict) else None
            if raw is not None:
                if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
                    raise InvalidRequestError("syncSet must be a list of broker addresses")
                sync_set = raw
            seq = body.get("syncSetSeq") if isinstance(body, dict) else None
            if seq is not None:
                if not isinstance(seq, int) or isinstance(seq, bool):
                    raise InvalidRequestError("syncSetSeq must be an integer")
                sync_seq = seq
        hb = Heartbeat(
            group=h.broker_name,
            address=h.broker_addr,
            claims_master=h.role.upper() in MASTER_STATES,
            epoch=h.epoch,
            max_offset=h.max_offset,
            priority=h.priority,
            sync_set=sync_set,
            sync_seq=sync_seq,
            starting=h.starting,
        )
        if not self.active():
            return self._refuse(cmd)
        try:
            a = self.core.heartbeat(hb)
        except MasterAlreadyAlive as exc:
            return cmd.response(ResponseCode.NO_PERMISSION, str(exc))
        try:
            await self._save()
        except StateConflict:
            return self._refuse(cmd)
        if not self.active():
            return self._refuse(cmd)  # the lease lapsed while saving: no MASTER answer from here
        answer = ControllerAssignment(
            role=a.role,
            master_addr=a.master or "",
            epoch=a.epoch,
            broker_id=a.broker_id,
            lease_ms=int(self.lease * 1000),
            sync_state_set=",".join(a.sync_set),
        )
        return cmd.response(ext=answer.to_ext())

    async def elect_master(self, cmd: Command, channel: object) -> Command:
        """An operator's election: waits out the master's lease, elects, answers the group's state."""
        h = ControllerElectRequest.from_ext(cmd.ext)
        core = self.core
        if not self.active():
            return self._refuse(cmd)
        try:
            not_before = core.request_election(h.broker_name, h.broker_addr or None)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from None
        await asyncio.sleep(max(0.0, not_before - core.clock()) + 0.01)
        if not self.active():
            return self._refuse(cmd)
        try:
            await self.tick()
        except StateConflict:
            return self._refuse(cmd)
        g = core.groups[h.broker_name]
        return cmd.response(body=encode_body(g.to_dict()))

    def status(self, cmd: Command, channel: object) -> Command:
        core = self.core
        lead = self.leadership
        if lead is not None and not lead.active():
            standby = {"controller": lead.me, "role": lead.role, ACTIVE_CONTROLLER: lead.leader}
            return cmd.response(body=encode_body({**standby, "groups": {}, "elections": []}))
        body = {
            "controller": self.address,
            "role": ACTIVE,
            ACTIVE_CONTROLLER: self.address,
            "graceSeconds": round(max(0.0, core.grace_until - core.clock()), 3),
            "masterTimeoutSeconds": core.master_timeout,
            "leaseSeconds": self.lease,
            "groups": {
                n: {**g.to_dict(), "alive": sorted(a for a in g.replicas if core.heartbeats.alive(a))}
                for n, g in sorted(core.groups.items())
            },
            "elections": [
                {"group": e.group, "old": e.old_master, "new": e.new_master, "epoch": e.epoch, "reason": e.reason}
                for e in core.history
            ],
        }
        return cmd.response(body=encode_body(body))


__all__ = ["ControllerService"]
