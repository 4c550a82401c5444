"""A broker's replication role as one service: the HA master or the HA slave, and the epoch file.

The broker wires one :class:`Replication` after its store is up. A master (brokerId 0,
ASYNC_MASTER or SYNC_MASTER) opens the HA listener and starts a first term (epoch 1) if
its store has none; a slave follows its master. ``wait_replicated`` is the SYNC_MASTER
seam of the send handler; ``info`` is what runtime info reports.
"""

from __future__ import annotations

import ssl as ssl_module
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pymq.broker.ha.acks import Waiter
from pymq.broker.ha.auth import Authenticate, Sign
from pymq.broker.ha.epoch_file import EpochFile
from pymq.broker.ha.master import HAMaster
from pymq.broker.ha.slave import HASlave

if TYPE_CHECKING:
    from pymq.broker.ha.meta_sync import SlaveMetaSync
    from pymq.broker.role.state import RoleMachine
    from pymq.broker.store import MessageStore
    from pymq.config import BrokerConfig
    from pymq.transport.client import RpcClient


def ha_listen_port(config: BrokerConfig, main_port: int) -> int:
    """``ha_port``, else the main port + 1 (RocketMQ's 10912 next to 10911), else any free port."""
    if config.ha_port is not None:
        return config.ha_port
    return config.port + 1 if config.port else 0


class Replication:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        *,
        rpc: RpcClient,
        address: Callable[[], str],
        discovered_master: Callable[[], str | None],
        advertised_host: str,
        meta_sync: SlaveMetaSync | None = None,
        listener_ssl: ssl_module.SSLContext | None = None,
        connector_ssl: ssl_module.SSLContext | None = None,
        authenticate: Authenticate | None = None,
        sign: Sign | None = None,
        role: RoleMachine,
    ) -> None:
        self.config = config
        #: the broker's role (master or slave: which side of the HA link this broker runs)
        self.role = role
        #: the configured master's HA address: used until the first role change
        self._ha_master_addr = config.ha_master_addr
        #: called when a master's sync-state set changes (controller mode: report it at once)
        self.on_sync_change: Callable[[], None] | None = None
        self.store = store
        self.rpc = rpc
        self.address = address
        self.discovered_master = discovered_master
        self.advertised_host = advertised_host
        #: TLS of the HA listener (a master) and of the link to the master (a slave): the broker's [tls]
        self.listener_ssl = listener_ssl
        self.connector_ssl = connector_ssl
        #: ACL of the HA link: the master checks each slave's signed HELLO, the slave signs its own
        self.authenticate = authenticate
        self.sign = sign
        #: a slave's periodic copy of its master's metadata (topics, offsets ...)
        self.meta_sync = meta_sync
        self._meta_sync_running = False
        self.epochs = EpochFile(store.root)
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None

    @property
    def is_slave(self) -> bool:
        return self.role.current.is_slave

    async def start(self) -> None:
        self.epochs.load()
        if self.is_slave:
            await self._start_slave()
        else:
            if not self.epochs.entries:
                self.epochs.begin_term(1, self.store.min_phy_offset)
            await self._start_master()

    async def _start_master(self) -> None:
        cfg = self.config
        self.master = HAMaster(
            self.store,
            self.epochs,
            cfg,
            host=cfg.host,
            port=ha_listen_port(cfg, cfg.port),
            advertised_host=self.advertised_host,
            ssl=self.listener_ssl,
            authenticate=self.authenticate,
            role=self.role,
        )
        self.master.on_sync_change = self.on_sync_change
        await self.master.start()
        if self.on_sync_change is not None:
            self.on_sync_change()  # a new master (a promotion): learn the controller's set at once

    async def _start_slave(self) -> None:
        self.slave = HASlave(
            self.store,
            self.epochs,
            self.config,
            rpc=self.rpc,
            address=self.address,
            discovered_master=self.discovered_master,
            ssl=self.connector_ssl,
            sign=self.sign,
            role=self.role,
            ha_master_addr=self._ha_master_addr,
        )
        await self.slave.start()
        if self.meta_sync is not None:
            await self.meta_sync.start()
            self._meta_sync_running = True

    async def stop(self) -> None:
        master, self.master = self.master, None
        slave, self.slave = self.slave, None
        if master is not None:
            await master.stop()
        if slave is not None:
            await slave.stop()
        if self._meta_sync_running and self.meta_sync is not None:
            self._meta_sync_running = False
            await self.meta_sync.stop()

    async def become_master(self, epoch: int = 0) -> int:
        """Stop following and start a new term at the commitlog end (epoch above every known one)."""
        await self.stop()
        new = max(epoch, self.epochs.epoch + 1)
        self.epochs.begin_term(new, self.store.max_phy_offset)
        await self._start_master()
        return new

    async def become_slave(self) -> None:
        """Stop serving slaves (waiting SYNC sends answer FLUSH_SLAVE_TIMEOUT) and follow the role's master
        (its HA address asked from it: the configured ``ha_master_addr`` belongs to the configured
        ``master_addr``, and is kept only while that is the master followed)."""
        await self.stop()
        cfg = self.config
        following = self.role.current.master_addr
        keep = cfg.ha_master_addr is not None and cfg.master_addr is not None and following == cfg.master_addr
        self._ha_master_addr = cfg.ha_master_addr if keep else None
        await self._start_slave()

    def wait_replicated(self, end: int, waiter: Waiter) -> int | None:
        master = self.master
        return master.wait_replicated(end, waiter) if master is not None else None

    def in_sync_replicas(self) -> int:
        """Replicas in sync, this master counted (RocketMQ's sync-state set size); 1 when not serving slaves."""
        master = self.master
        if master is None:
            return 1
        return 1 + len(master.acks.in_sync())

    def report_sync_state_set(self) -> list[str]:
        """The slaves of this master's sync-state set, to report to the controller (they count until
        its answer); empty when not serving slaves."""
        return self.master.acks.sync.reporting() if self.master is not None else []

    def confirm_sync_set(self, controller_set: list[str]) -> None:
        """The controller's sync-state set for this master (controller mode)."""
        if self.master is not None:
            self.master.confirm_sync_set(controller_set)

    def ha_address(self) -> str:
        return self.master.address if self.master is not None else ""

    def lag_bytes(self) -> int:
        """A slave's bytes behind its master; a master's largest slave lag (0 without slaves)."""
        if self.slave is not None:
            return self.slave.lag_bytes
        if self.master is not None:
            top = self.store.max_phy_offset
            return max((max(0, top - s.acked) for s in self.master.acks.slaves.values()), default=0)
        return 0

    def info(self) -> dict[str, Any]:
        """Replication keys of the broker's runtime info (see docs/ARCHITECTURE.md "Replication")."""
        last = self.epochs.last
        out: dict[str, Any] = {
            "epoch": self.epochs.epoch,
            "epochStartOffset": last.start_offset if last is not None else 0,
            "epochs": [[e.epoch, e.start_offset] for e in self.epochs.entries],
            "haAddress": self.ha_address(),
            "replicationLagBytes": self.lag_bytes(),
        }
        if self.master is not None:
            slaves = self.master.slave_info()
            out["slaves"] = slaves
            out["inSyncSlaves"] = sum(1 for s in slaves if s["inSync"])
            out["inSyncReplicas"] = self.config.in_sync_replicas
        if self.slave is not None:
            s = self.slave
            out.update(
                masterAddress=s.master_addr or "",
                masterHaAddress=s.master_ha_addr or "",
                masterConnected=s.connected,
                slaveOffset=s.offset,
                masterMaxOffset=s.master_max,
                replicationRefused=s.refused or "",
            )
        return out
