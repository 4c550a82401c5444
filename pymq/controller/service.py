"""The controller's RPC face, embedded in a nameserver (``pymq-namesrv --controller embedded``).

It answers CONTROLLER_HEARTBEAT with the broker's assignment and CONTROLLER_STATUS with every
group's state, runs :meth:`Controller.tick` a few times a second, saves the state through its
:class:`StateStore` whenever it changed (before answering), and tells its owner of every
election (``on_election``: the nameserver drops the old master's routes at once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pymq.controller.core import Controller, Election, Heartbeat, MasterAlreadyAlive
from pymq.controller.store import StateStore
from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.requests import ControllerAssignment, ControllerElectRequest, ControllerHeartbeatRequest

log = logging.getLogger("pymq.controller")

MASTER_STATES = frozenset({"MASTER", "FENCED"})


class ControllerService:
    """One active controller over ``store``; ``start()`` loads the state and begins ticking."""

    def __init__(
        self,
        store: StateStore,
        *,
        master_timeout: float,
        lease: float,
        unclean_election: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_election: Callable[[Election], None] | None = None,
    ) -> None:
        if lease >= master_timeout:
            raise ValueError("the master lease must be shorter than the election timeout")
        self.store = store
        self.lease = lease
        self.core = Controller(clock, master_timeout, unclean_election, lease=lease)
        self.on_election = on_election
        self._task: asyncio.Task[None] | None = None

    def table(self) -> dict[int, Any]:
        return {
            RequestCode.CONTROLLER_HEARTBEAT: self.heartbeat,
            RequestCode.CONTROLLER_STATUS: self.status,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
        }

    async def start(self) -> None:
        self.core.groups = self.store.load()
        # A restarted controller has heard no one yet: masters get two timeouts to check in (their
        # clients may be backing off from the address that was down).
        now = self.core.clock()
        for g in self.core.groups.values():
            if g.master is not None:
                self.core.heartbeats.last[g.master] = now + self.core.master_timeout
        self._task = asyncio.create_task(self._tick_loop(), name="controller-tick")
        log.info("controller_started groups=%d", len(self.core.groups))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _tick_loop(self) -> None:
        interval = min(0.2, self.core.master_timeout / 5)
        while True:
            await asyncio.sleep(interval)
            try:
                self.tick()
            except Exception:  # a state store that fails (etcd down, a conflict): decide nothing, retry
                log.exception("controller_tick_failed")

    def tick(self) -> list[Election]:
        elections = self.core.tick()
        self._save()
        for e in elections:
            if self.on_election is not None:
                self.on_election(e)
        return elections

    def _save(self) -> None:
        if self.core.dirty:
            self.store.save(self.core.groups)
            self.core.dirty = False

    def heartbeat(self, cmd: Command, channel: object) -> Command:
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
        try:
            a = self.core.heartbeat(hb)
        except MasterAlreadyAlive as exc:
            return cmd.response(ResponseCode.NO_PERMISSION, str(exc))
        self._save()
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
        try:
            not_before = core.request_election(h.broker_name, h.broker_addr or None)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from None
        await asyncio.sleep(max(0.0, not_before - core.clock()) + 0.01)
        self.tick()
        g = core.groups[h.broker_name]
        return cmd.response(body=encode_body(g.to_dict()))

    def status(self, cmd: Command, channel: object) -> Command:
        core = self.core
        body = {
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
