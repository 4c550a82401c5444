"""The broker's fencing and controller-mode wiring (moved out of :mod:`pymq.broker.app`).

Without a controller, a master fences itself against a master of a newer term in its group: once
at startup (it starts as that master's slave) and on every registration interval (it steps down).
In controller mode (issue 32) the controller decides instead: :func:`join_controller` sends the
first heartbeat before the broker serves and installs the lease gate and the heartbeat loop.
These are functions taking what they need, never the app.
"""

from __future__ import annotations

from collections.abc import Callable

from pymq.broker.ha.replication import Replication
from pymq.broker.role.change import RoleChanger, newer_master
from pymq.broker.role.controlled import ControllerLink, LeaseGate
from pymq.broker.role.state import RoleEvent, RoleMachine, RoleState
from pymq.broker.service import Service
from pymq.broker.store import MessageStore
from pymq.config import BrokerConfig
from pymq.logs import get_logger
from pymq.tasks import wait_within
from pymq.transport.client import RpcClient
from pymq.transport.dispatch import Dispatcher

log = get_logger("broker")


async def fence_at_startup(
    namesrv_client: RpcClient, config: BrokerConfig, address: str, role: RoleMachine, replication: Replication
) -> None:
    """A master whose group has a master of a newer term starts as that master's slave."""
    replication.epochs.load()
    try:
        newer = await wait_within(newer_master(namesrv_client, config, address, replication.epochs.epoch), 5.0)
    except TimeoutError:
        log.warning("fence_check_timed_out", namesrv=config.namesrv_addrs)
        return
    if newer is None:
        return
    master, epoch, broker_id = newer
    log.warning(
        "fenced_by_newer_master",
        master=master,
        master_epoch=epoch,
        own_epoch=replication.epochs.epoch,
        broker_id=broker_id,
    )
    role.fire(RoleEvent.DEMOTE, master_addr=master, broker_id=broker_id, epoch=replication.epochs.epoch)


async def fence_check(
    namesrv_client: RpcClient,
    config: BrokerConfig,
    address: str,
    role: RoleMachine,
    role_changer: RoleChanger,
    replication: Replication | None,
) -> None:
    """Each registration interval: a running master steps down for a master of a newer term."""
    if replication is None or role.current.state is not RoleState.MASTER or config.controller_mode:
        return
    newer = await newer_master(namesrv_client, config, address, replication.epochs.epoch)
    if newer is not None:
        master, epoch, broker_id = newer
        log.warning("fenced_by_newer_master", master=master, master_epoch=epoch, own_epoch=replication.epochs.epoch)
        await role_changer.demote(master, broker_id)


async def join_controller(
    config: BrokerConfig,
    namesrv_client: RpcClient,
    role_changer: RoleChanger,
    address: Callable[[], str],
    replication: Replication,
    store: MessageStore,
    dispatcher: Dispatcher,
    serving_services: list[Service],
) -> ControllerLink:
    """Controller mode (issue 32): the first heartbeat, before serving; the lease gate and the
    heartbeat loop. A master whose group has a live master is refused here (ConfigError)."""
    replication.epochs.load()
    # Its own client: reconnecting to a restarted controller must not wait out the nameserver
    # client's backoff (up to 5 s) while the lease runs; same TLS and signing.
    interval = config.controller_heartbeat_seconds
    rpc = RpcClient(connect_timeout=interval * 2, backoff_max=interval, ssl=namesrv_client.ssl)
    rpc.signer = namesrv_client.signer
    link = ControllerLink(
        config,
        rpc,
        role_changer,
        address=address,
        max_offset=lambda: store.max_phy_offset,
        sync_set=replication.report_sync_state_set,
        confirm_sync_set=replication.confirm_sync_set,
    )
    replication.on_sync_change = link.wake
    try:
        link.apply_at_startup(await link.join())
    except BaseException:
        await rpc.close()
        raise
    dispatcher.add_interceptor(LeaseGate(link))
    serving_services.insert(0, link)
    return link
