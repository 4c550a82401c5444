"""Changing a broker's role while it runs: promote a slave, fence or demote a master.

The admin's switchover (``pymq-admin broker-role --promote``, :meth:`AdminClient.promote_slave`)
drives three NOTIFY_BROKER_ROLE_CHANGED requests: FENCED to the old master (it refuses writes
and stops registering, but keeps streaming), then — once the slave holds the master's whole
commitlog (or with ``--force``) — a master role to the slave, then SLAVE to the old master.

* **Promote** (slave -> master): the slave stops following, begins a term with an epoch
  above every one it knows (written to its epoch file before anything else), takes brokerId
  0, drops the read-only gate, starts the master services (schedule, timers, priority
  refill, transaction check-back, pop revival: :mod:`pymq.broker.master_services`, from
  the state it copied from its master) with its handlers for the master role and the HA
  listener, and registers with the nameservers under id 0 (the
  nameserver replaces the old master's entry; its own slave entry goes with the unregister).
* **Fence**: the read-only gate goes up and the master services stop (a fenced master puts
  nothing, so its slave can catch up to a commitlog that no longer grows).
* **Demote** (master -> slave of ``master_addr``): the HA listener stops (waiting SYNC sends
  answer FLUSH_SLAVE_TIMEOUT), the master services stop and their state files go (stale
  for a slave: see ``drop_master_state``), the read-only gate goes up, the
  broker takes the promoted slave's old id and follows the new master; the epoch check at
  the join truncates whatever tail the new master lacks.
* **Startup fencing**: a broker configured as master asks the nameservers, before it serves,
  who is its group's master; if another broker holds id 0 with a higher epoch, it starts as
  that broker's slave instead (see :func:`newer_master`). A master that keeps running through
  a partition is fenced by the same check each registration interval.

Each of these drives :class:`~pymq.broker.role.state.RoleMachine` through its transitions (a
demotion of a running master passes through FENCED: writes stop before anything else moves);
the write gate and everything else that follows the role observe the machine. No handler is
swapped: handlers read the role when they run. The host is the broker app seen through
:class:`RoleHost`; nothing here imports the app.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from pymq.broker.role.state import RoleEvent, RoleMachine, RoleState
from pymq.config import BrokerRole
from pymq.errors import InvalidRequestError, PymqError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body
from pymq.tasks import wait_within

if TYPE_CHECKING:
    from pymq.broker.registration import NamesrvRegistrar
    from pymq.config import BrokerConfig
    from pymq.protocol.requests import BrokerRoleChangeRequest
    from pymq.transport.client import RpcClient

log = get_logger("broker.role")

FENCED = RoleState.FENCED.value


class _MetaSync(Protocol):
    async def sync_once(self) -> bool: ...


class _Epochs(Protocol):
    @property
    def epoch(self) -> int: ...


class ReplicationSide(Protocol):
    """What a role change does to replication (``pymq.broker.ha.replication.Replication``)."""

    @property
    def epochs(self) -> _Epochs: ...
    @property
    def meta_sync(self) -> _MetaSync | None: ...

    async def become_master(self, epoch: int = 0) -> int: ...

    async def become_slave(self) -> None: ...

    def info(self) -> dict[str, Any]: ...


class RoleHost(Protocol):
    address: str
    role: RoleMachine
    registrar: NamesrvRegistrar

    @property
    def replication(self) -> ReplicationSide | None: ...

    async def start_master_services(self) -> None: ...

    async def stop_master_services(self) -> None: ...

    def drop_master_state(self) -> None: ...


class RoleChanger:
    """Carries out role changes (admin requests, fence checks) as transitions of the host's role."""

    def __init__(self, host: RoleHost) -> None:
        self.host = host
        self._lock = asyncio.Lock()

    @property
    def fenced(self) -> bool:
        return self.host.role.current.state is RoleState.FENCED

    async def change(self, req: BrokerRoleChangeRequest) -> dict[str, Any]:
        """Apply one NOTIFY_BROKER_ROLE_CHANGED request; returns the new replication state."""
        role = req.role.upper()
        async with self._lock:
            if role in (BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER):
                await self.promote(BrokerRole(role), req.epoch)
            elif role == BrokerRole.SLAVE:
                if not req.master_addr:
                    raise InvalidRequestError("a role change to SLAVE needs the master address (masterAddr)")
                await self.demote(req.master_addr, req.broker_id)
            elif role == FENCED:
                await self.fence()
            else:
                raise InvalidRequestError(f"unknown role {req.role!r}: ASYNC_MASTER, SYNC_MASTER, SLAVE or FENCED")
        return self.state()

    def state(self) -> dict[str, Any]:
        h = self.host
        rep = h.replication
        role = h.role.current
        return {
            "role": role.name,
            "brokerId": role.broker_id,
            "address": h.address,
            **(rep.info() if rep is not None else {}),
        }

    async def promote(self, flavour: BrokerRole, epoch: int = 0, final_sync_timeout: float = 5.0) -> None:
        h = self.host
        machine = h.role
        rep = h.replication
        assert rep is not None
        current = machine.current
        if current.writable:
            machine.fire(RoleEvent.RETUNE, flavour=flavour)  # already master: only the flavour changes
            return
        if not machine.allows(RoleEvent.PROMOTE):
            raise InvalidRequestError(f"a broker in state {current.state.value} cannot be promoted")
        old_id = current.broker_id
        machine.fire(RoleEvent.PROMOTE)
        try:
            if current.state is RoleState.SLAVE and rep.meta_sync is not None and final_sync_timeout > 0:
                # A last copy of the master's topics and offsets, if it still answers (a switchover).
                try:
                    await wait_within(rep.meta_sync.sync_once(), final_sync_timeout)
                except (PymqError, TimeoutError) as exc:
                    log.info("final_meta_sync_skipped", reason=str(exc) or type(exc).__name__)
            new_epoch = await rep.become_master(epoch)
            await h.registrar.pause()
            if old_id != 0:
                await h.registrar.unregister_all()  # the slave entry (the new id replaces it anyway)
        except BaseException:
            machine.fire(RoleEvent.ABORT)
            raise
        machine.fire(RoleEvent.PROMOTED, flavour=flavour, epoch=new_epoch)
        h.registrar.master_addr = None
        await h.start_master_services()
        await h.registrar.resume()
        log.warning("promoted_to_master", role=flavour.value, epoch=new_epoch, from_broker_id=old_id)

    async def fence(self) -> None:
        h = self.host
        machine = h.role
        if machine.current.state is RoleState.FENCED:
            return
        if h.replication is None or not machine.allows(RoleEvent.FENCE):
            raise InvalidRequestError("only a master can be fenced")
        machine.fire(RoleEvent.FENCE, epoch=h.replication.epochs.epoch)
        await h.registrar.pause()
        await h.stop_master_services()
        log.warning("master_fenced", epoch=h.replication.epochs.epoch)

    async def unfence(self) -> None:
        """A fenced master takes writes again (its controller lease was renewed)."""
        h = self.host
        machine = h.role
        if machine.current.state is not RoleState.FENCED:
            return
        machine.fire(RoleEvent.UNFENCE)
        await h.start_master_services()
        await h.registrar.resume()
        log.warning("master_unfenced", epoch=machine.current.epoch)

    async def demote(self, master_addr: str, broker_id: int) -> None:
        h = self.host
        machine = h.role
        rep = h.replication
        assert rep is not None
        if master_addr == h.address:
            raise InvalidRequestError("a broker cannot follow itself")
        current = machine.current
        if not machine.allows(RoleEvent.DEMOTE):
            raise InvalidRequestError(f"a broker in state {current.state.value} cannot be demoted")
        new_id = broker_id if broker_id > 0 else (current.broker_id or 1)
        if current.writable:
            machine.fire(RoleEvent.FENCE, epoch=rep.epochs.epoch)  # writes stop first
        await h.registrar.pause()
        if current.broker_id != new_id:
            await h.registrar.unregister_all()  # removes nothing if the new master already holds the id
        await h.stop_master_services()
        h.drop_master_state()
        machine.fire(RoleEvent.DEMOTE, master_addr=master_addr, broker_id=new_id, epoch=rep.epochs.epoch)
        await rep.become_slave()
        await h.registrar.resume()
        log.warning("demoted_to_slave", master=master_addr, broker_id=new_id)


async def newer_master(
    rpc: RpcClient, config: BrokerConfig, own_address: str, own_epoch: int
) -> tuple[str, int, int] | None:
    """Another broker of this group registered as master with a higher epoch: (address, its epoch,
    the id this broker should take), else None. Unreachable nameservers or masters count as none."""
    for ns in config.namesrv_addrs:
        try:
            resp = await rpc.invoke_ok(ns, Command.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout=3.0)
        except PymqError:
            continue
        info: Any = decode_body(resp.body, "cluster info")
        group = (info.get("brokerAddrTable") or {}).get(config.broker_name) if isinstance(info, dict) else None
        addrs = {int(k): v for k, v in ((group or {}).get("brokerAddrs") or {}).items()}
        master = addrs.get(0)
        if not master or master == own_address:
            continue
        try:
            r = await rpc.invoke_ok(master, Command.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=3.0)
        except PymqError:
            continue
        other: Any = decode_body(r.body, "runtime info")
        epoch = int(other.get("epoch", 0)) if isinstance(other, dict) else 0
        if epoch > own_epoch:
            taken = set(addrs)
            free = next(i for i in range(1, len(taken) + 2) if i not in taken)
            return master, epoch, free
    return None


__all__ = ["FENCED", "ReplicationSide", "RoleChanger", "RoleHost", "newer_master"]
