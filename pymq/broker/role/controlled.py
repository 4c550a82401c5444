"""A broker in controller mode (issue 32): heartbeats to the controller, takes the role it is
assigned, and holds its mastership by a lease.

Each heartbeat carries the role state, epoch and commitlog max offset (a master adds its
sync-state set, :mod:`pymq.broker.ha.sync_state`; a change of the set sends a heartbeat at once,
:meth:`ControllerLink.wake`). The answer is applied through :class:`RoleChanger`: MASTER promotes
a slave (or unfences a master whose lease had lapsed) and carries the controller's sync-state
set, which the master then counts (``confirm_sync_set``); SLAVE of another broker demotes a
master or makes a slave follow the new one.

**The lease.** A MASTER answer renews the lease until *the heartbeat's sending time* plus the
controller's ``leaseMs``. The controller elects only after hearing nothing from the master
for its master timeout, counted from when it *received* the last heartbeat, which is after it
was sent; the lease is shorter than the timeout, so the master's lease has lapsed before the
controller may elect (docs/REPLICATION.md, "Automatic failover"). With a lapsed lease the
:class:`LeaseGate` refuses writes at once (checked per request, so a paused process that
resumes answers no write it had queued), and the watch fences the master.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pymq.broker.role.gate import SLAVE_REFUSALS
from pymq.broker.role.state import RoleEvent, RoleState
from pymq.config import BrokerRole
from pymq.controller.leadership import ACTIVE_CONTROLLER
from pymq.errors import ConfigError, PymqError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.protocol.requests import ControllerAssignment, ControllerHeartbeatRequest
from pymq.tasks import cancel_and_wait, wait_within
from pymq.transport.channel import Channel
from pymq.transport.interceptor import Interceptor

if TYPE_CHECKING:
    from pymq.broker.role.change import RoleChanger
    from pymq.config import BrokerConfig
    from pymq.transport.client import RpcClient

log = get_logger("broker.controller")

#: the writes a master without a lease refuses (the slave gate's list, offsets excepted)
LEASE_CODES = frozenset(int(c) for c in SLAVE_REFUSALS if c != RequestCode.UPDATE_CONSUMER_OFFSET)


class LeaseGate(Interceptor):
    """Refuses writes while the broker is MASTER without a valid lease."""

    def __init__(self, link: ControllerLink) -> None:
        self.link = link
        self.codes = LEASE_CODES

    def before(self, request: Command, channel: Channel) -> Command | None:
        if self.link.lease_valid():
            return None
        return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, "master lease lapsed: not the master now")


class ControllerLink:
    """The heartbeat loop and the lease of one broker."""

    def __init__(
        self,
        config: BrokerConfig,
        rpc: RpcClient,
        changer: RoleChanger,
        *,
        address: Callable[[], str],
        max_offset: Callable[[], int],
        sync_set: Callable[[], list[str]],
        confirm_sync_set: Callable[[list[str]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.rpc = rpc
        self.changer = changer
        self.address = address
        self.max_offset = max_offset
        self.sync_set = sync_set
        self.confirm_sync_set = confirm_sync_set
        self.clock = clock
        self._wake = asyncio.Event()
        #: the sync-state set reports' sequence number: increasing, and above any earlier process's
        #: (it starts at the wall clock in ns; one report per heartbeat never catches up with it)
        self._seq = time.time_ns()
        self.addrs = list(config.controller_addrs or config.namesrv_addrs)
        self.interval = config.controller_heartbeat_seconds
        self.lease_deadline = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        #: the role change under way (promote, demote, unfence), if any
        self._change: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Heartbeat now (the sync-state set changed), not at the next interval."""
        self._wake.set()

    def lease_valid(self) -> bool:
        return self.clock() < self.lease_deadline

    async def join(self) -> ControllerAssignment | None:
        """The first heartbeat, before serving: a refusal (a live master of this group) is a ConfigError."""
        try:
            return await self._beat(starting=True)
        except _Refused as exc:
            raise ConfigError(str(exc)) from None

    def apply_at_startup(self, a: ControllerAssignment | None) -> None:
        """Before the services start: a master assigned SLAVE starts as the new master's slave."""
        machine = self.changer.host.role
        if a is None or a.role != "SLAVE" or not a.master_addr or not machine.current.writable:
            return
        rep = self.changer.host.replication
        epoch = rep.epochs.epoch if rep is not None else 0
        log.warning("controller_assigned_slave_at_startup", master=a.master_addr, broker_id=a.broker_id)
        machine.fire(RoleEvent.DEMOTE, master_addr=a.master_addr, broker_id=max(a.broker_id, 1), epoch=epoch)

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._beat_loop(), name="broker-controller-heartbeat"),
            asyncio.create_task(self._lease_watch(), name="broker-lease-watch"),
        ]

    async def stop(self) -> None:
        for t in [*self._tasks, self._change]:
            await cancel_and_wait(t)
        self._tasks = []
        await self.rpc.close()

    async def _beat_loop(self) -> None:
        while True:
            try:
                await self._beat(starting=False)
            except _Refused as exc:
                log.error("controller_refused", reason=str(exc))
            except Exception:  # the loop must outlive one bad round
                log.exception("controller_heartbeat_failed")
            try:
                await wait_within(self._wake.wait(), self.interval)
            except TimeoutError:
                pass
            self._wake.clear()

    async def _lease_watch(self) -> None:
        while True:
            await asyncio.sleep(min(0.05, self.interval / 4))
            if self.changer.host.role.current.state is RoleState.MASTER and not self.lease_valid():
                log.warning("master_lease_lapsed")
                async with self.changer._lock:
                    if self.changer.host.role.current.state is RoleState.MASTER and not self.lease_valid():
                        await self.changer.fence()

    async def _beat(self, *, starting: bool) -> ControllerAssignment | None:
        role = self.changer.host.role.current
        rep = self.changer.host.replication
        epoch = rep.epochs.epoch if rep is not None else role.epoch
        req = ControllerHeartbeatRequest(
            cluster_name=self.config.cluster_name,
            broker_name=self.config.broker_name,
            broker_addr=self.address(),
            role=role.state.value,
            epoch=epoch,
            max_offset=self.max_offset(),
            priority=self.config.controller_priority,
            starting=starting,
        )
        body = b""
        if role.state is RoleState.MASTER:
            self._seq += 1
            body = encode_body({"syncSet": self.sync_set(), "syncSetSeq": self._seq})
        sent = self.clock()
        order = list(self.addrs)
        i = 0
        while i < len(order):
            addr = order[i]
            i += 1
            cmd = Command.request(RequestCode.CONTROLLER_HEARTBEAT, req.to_ext(), body)
            try:
                resp = await self.rpc.invoke(addr, cmd, timeout=max(self.interval, 0.5))
            except (PymqError, OSError, TimeoutError) as exc:
                log.debug("controller_unreachable", controller=addr, reason=str(exc) or type(exc).__name__)
                continue
            if resp.code == ResponseCode.NO_PERMISSION:
                raise _Refused(resp.remark or "refused by the controller")
            if resp.code != ResponseCode.SUCCESS:
                # not a controller, or a standby: one that names the active controller sends us there next
                active = (resp.ext or {}).get(ACTIVE_CONTROLLER)
                log.debug("controller_declined", controller=addr, active=active, reason=resp.remark)
                if isinstance(active, str) and active in order[i:]:
                    order.remove(active)
                    order.insert(i, active)
                continue
            self._prefer(addr)
            a = ControllerAssignment.from_ext(resp.ext)
            if a.role == "MASTER" and self.confirm_sync_set is not None:
                self.confirm_sync_set([s for s in a.sync_state_set.split(",") if s])
            if not starting:
                await self._apply(a, sent)
            elif a.role == "MASTER":
                self.lease_deadline = sent + a.lease_ms / 1000
            return a
        return None

    def _prefer(self, addr: str) -> None:
        """The controller that answered is asked first from now on (the active one of several)."""
        if self.addrs and self.addrs[0] != addr and addr in self.addrs:
            self.addrs.remove(addr)
            self.addrs.insert(0, addr)

    async def _apply(self, a: ControllerAssignment, sent: float) -> None:
        """Renew or drop the lease now; a role change runs beside the heartbeats (it may take seconds)."""
        if a.role == "MASTER":
            self.lease_deadline = sent + a.lease_ms / 1000
        else:
            self.lease_deadline = 0.0
        if self._change is not None and not self._change.done():
            return  # one role change at a time; the next heartbeat's answer is applied after it
        if self._needs_change(a):
            self._change = asyncio.create_task(self._change_role(a, sent), name="broker-controller-role-change")

    def _needs_change(self, a: ControllerAssignment) -> bool:
        current = self.changer.host.role.current
        state = current.state
        if a.role == "MASTER":
            return state is RoleState.FENCED or state is RoleState.SLAVE
        if not a.master_addr or a.master_addr == self.address():
            return False
        return state in (RoleState.MASTER, RoleState.FENCED) or (
            state is RoleState.SLAVE and current.master_addr != a.master_addr
        )

    async def _change_role(self, a: ControllerAssignment, sent: float) -> None:
        changer = self.changer
        try:
            async with changer._lock:
                if not self._needs_change(a):
                    return
                state = changer.host.role.current.state
                if a.role == "MASTER" and state is RoleState.FENCED:
                    await changer.unfence()
                elif a.role == "MASTER":
                    log.warning("controller_elected_this_broker", epoch=a.epoch)
                    # the controller found the old master silent: no last metadata copy from it (the
                    # periodic one stands; a paused master could hold the promotion for seconds)
                    flavour = BrokerRole(self.config.controller_master_role)
                    await changer.promote(flavour, a.epoch, final_sync_timeout=0)
                else:
                    await changer.demote(a.master_addr, a.broker_id)
        except Exception:  # logged; the next heartbeat's answer tries again
            log.exception("controller_role_change_failed", role=a.role, master=a.master_addr)


class _Refused(Exception):
    pass


__all__ = ["LEASE_CODES", "ControllerLink", "LeaseGate"]
