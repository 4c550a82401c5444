"""The client instance: what every producer and consumer of one client id shares.

One connection per broker, the route cache (:class:`~pymq.client.routes.RouteCache`, the
only copy of route data in the client), heartbeats to every broker, route refresh,
rebalance and offset persistence run here, once per client id (``ip@instance``) and event
loop. Producers and consumers acquire the instance when they start and release it when
they stop; the last release closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from pymq.client import broker_api
from pymq.client.client_config import ClientConfig
from pymq.client.failover import MasterWatch, RefreshPacer, calls_for_refresh, masterless
from pymq.client.namesrv import NamesrvClient, parse_addrs
from pymq.client.routes import RouteCache
from pymq.clock import SYSTEM_CLOCK, Clock
from pymq.errors import ConfigError, PymqError
from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.message import decode_message
from pymq.protocol.requests import (
    CheckTransactionStateRequest,
    ConsumerGroupRequest,
    ConsumerRunningInfoRequest,
    ResetOffsetRequest,
)
from pymq.protocol.requests_operator import ConsumeMessageDirectlyRequest
from pymq.protocol.route import MASTER_ID, MessageQueue, TopicRouteData
from pymq.protocol.transaction import PGROUP
from pymq.tasks import cancel_all, cancel_and_wait, wait_within
from pymq.transport.client import RpcClient
from pymq.transport.dispatch import Dispatcher
from pymq.transport.net import local_ip

if TYPE_CHECKING:
    from pymq.transport.channel import Channel

log = get_logger("client")

#: after a failure, how long the routes are fetched again every gap while a group has no master
MASTERLESS_FOLLOW_SECONDS = 20.0


class ClientMember(Protocol):
    """What the instance needs from a producer or consumer registered with it."""

    group: str

    def heartbeat_data(self) -> dict[str, Any] | None:
        """This member's entry in the heartbeat (None: producers send only their group)."""
        ...

    def topics_of_interest(self) -> list[str]:
        """Topics whose routes the instance keeps fresh for this member."""
        ...


class ConsumerMember(ClientMember, Protocol):
    """A consumer: the instance drives its rebalance and offset persistence."""

    async def rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...

    def reset_offsets(self, table: dict[MessageQueue, int]) -> None: ...

    async def masters_moved(self, brokers: set[str]) -> None:
        """These broker groups have a new master (an election): orderly consumers lock there."""
        ...

    def running_info(self, client_id: str, *, jstack: bool = False) -> dict[str, Any]: ...


class ClientInstance:
    _registry: dict[tuple[str, int], ClientInstance] = {}

    def __init__(self, config: ClientConfig, client_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.client_id = client_id
        #: drives route refresh, heartbeats, offset persistence and rebalance (a FakeClock in tests)
        self.clock = clock
        self.dispatcher = Dispatcher(
            {
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_ids_changed,
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self._on_reset_offset,
                RequestCode.CHECK_TRANSACTION_STATE: self._on_check_transaction,
                RequestCode.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
                RequestCode.CONSUME_MESSAGE_DIRECTLY: self._on_consume_directly,
            },
            name="client",
        )
        self.rpc = RpcClient(self.dispatcher, **config.security().rpc_options(config.namesrv_addrs))
        self.namesrv = NamesrvClient(self.rpc, config.namesrv_addrs, config.rpc_timeout_seconds)
        #: the one route cache of this client id: producers and consumers ask it for queues
        self.routes = RouteCache(
            self.namesrv.route_or_none, min_gap=config.route_refresh_min_interval_seconds, clock=clock.monotonic
        )
        #: route refreshes asked for by failures (issue 32): one at a time, one per min gap
        self._pacer = RefreshPacer(config.route_refresh_min_interval_seconds)
        self._refresh_wanted = asyncio.Event()
        #: done when the refresh that starts next has finished (made by whoever waits for it)
        self._next_refresh: asyncio.Future[None] | None = None
        self._refresh_lock = asyncio.Lock()
        self._master_watch = MasterWatch(MASTERLESS_FOLLOW_SECONDS)
        #: broker names with a new master not announced to the members yet, and the task announcing them
        self._moved: set[str] = set()
        self._moved_task: asyncio.Task[None] | None = None
        self.routes.on_master_moved = self._on_master_moved
        self.producers: dict[str, ClientMember] = {}
        self.consumers: dict[str, ConsumerMember] = {}
        self._refs = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_now = asyncio.Event()
        self._started = False
        self._key: tuple[str, int] | None = None

    # --- lifecycle ---------------------------------------------------------------------------------------

    @classmethod
    def acquire(cls, namesrv: str | list[str], *, clock: Clock | None = None, **options: Any) -> ClientInstance:
        """The instance for this client id on the running loop, created on first use (with ``clock``)."""
        config = ClientConfig.from_options(parse_addrs(namesrv), options)
        instance_name = config.instance_name or str(os.getpid())
        client_id = f"{config.client_ip or local_ip()}@{instance_name}"
        key = (client_id, id(asyncio.get_running_loop()))
        inst = cls._registry.get(key)
        if inst is None:
            # Another loop in this process already uses the id: keep ids unique per connection.
            if any(k[0] == client_id for k in cls._registry):
                client_id = f"{client_id}#{sum(1 for k in cls._registry if k[0].startswith(client_id)) + 1}"
            inst = cls(config, client_id, clock or SYSTEM_CLOCK)
            inst._key = key
            cls._registry[key] = inst
        elif inst.config.security() != config.security():
            # One instance, one connection per broker: it cannot sign as two accounts (issue 20).
            raise ConfigError(
                f"client id {client_id} is already used in this process with other credentials or TLS "
                "options; give this producer or consumer its own instance_name"
            )
        inst._refs += 1
        return inst

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        cfg = self.config
        self._spawn(self._every(cfg.poll_namesrv_interval_seconds, self.refresh_routes), "route-refresh")
        self._spawn(self._every(cfg.heartbeat_interval_seconds, self.send_heartbeat_to_all), "heartbeat")
        self._spawn(self._every(cfg.persist_offset_interval_seconds, self.persist_offsets), "offset-persist")
        self._spawn(self._rebalance_loop(), "rebalance")
        self._spawn(self._refresh_on_demand(), "route-refresh-on-demand")

    async def release(self) -> None:
        self._refs -= 1
        if self._refs > 0:
            return
        if self._key is not None:
            self._registry.pop(self._key, None)
        await cancel_and_wait(self._moved_task)
        await cancel_all(self._tasks)
        await self.rpc.close()

    async def _every(self, interval: float, fn: Callable[[], Awaitable[None]]) -> None:
        """Call ``fn`` every ``interval`` seconds of the instance's clock; a failure does not stop it."""
        while True:
            await self.clock.sleep(interval)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic_task_failed", task=getattr(fn, "__name__", "?"))

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(f"pymq-client-{name}")
        self._tasks.append(task)

    # --- routes ------------------------------------------------------------------------------------------

    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Fetch a topic's route into the cache now; None when the topic has no route."""
        return await self.routes.update(topic)

    async def refresh_routes(self) -> None:
        """Fetch the route of every topic in use (the members' and any cached one, e.g. a SimpleConsumer's)."""
        async with self._refresh_lock:  # the periodic refresh and one asked for by a failure: one at a time
            self._pacer.started(self.clock.monotonic())
            topics = set(self.routes.routes)
            for member in [*self.producers.values(), *self.consumers.values()]:
                topics.update(member.topics_of_interest())
            for topic in sorted(topics):
                try:
                    await self.update_route(topic)
                except PymqError as exc:
                    log.warning("route_refresh_failed", topic=topic, reason=str(exc))

    def note_failure(self, exc: BaseException) -> bool:
        """A request to a broker failed: refresh the routes soon if the failure calls for it (a
        broker gone, or one answering it is not the master). True if a refresh was asked for."""
        if not calls_for_refresh(exc):
            return False
        log.debug("route_refresh_requested", reason=str(exc) or type(exc).__name__)
        self.request_refresh()
        return True

    def request_refresh(self) -> None:
        """Refresh the routes as soon as the pacer allows (several requests: one refresh)."""
        self._refresh_wanted.set()

    @property
    def running(self) -> bool:
        """Started (its periodic tasks and the refreshes asked for by failures run)."""
        return self._started

    async def refreshed(self, timeout: float) -> bool:
        """Ask for a refresh and wait (at most ``timeout`` s) until one that started after now is done."""
        if not self._started or timeout <= 0:
            return False
        if self._next_refresh is None or self._next_refresh.done():
            self._next_refresh = asyncio.get_running_loop().create_future()
        fut = self._next_refresh
        self.request_refresh()
        try:
            await wait_within(asyncio.shield(fut), timeout)
        except TimeoutError:
            return False
        return True

    async def _refresh_on_demand(self) -> None:
        while True:
            await self._refresh_wanted.wait()
            wait = self._pacer.wait(self.clock.monotonic())
            if wait > 0:
                await self.clock.sleep(wait)
            self._refresh_wanted.clear()
            fut, self._next_refresh = self._next_refresh, None
            try:
                await self.refresh_routes()
                if self._master_watch.again(bool(masterless(self.routes.broker_addrs)), self.clock.monotonic()):
                    self.request_refresh()  # between two masters: look again after the gap
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("route_refresh_failed")
            finally:
                if fut is not None and not fut.done():
                    fut.set_result(None)

    def _on_master_moved(self, moved: set[str]) -> None:
        """The route cache saw new masters: announce them from a task (one at a time)."""
        self._moved |= moved
        if self._started and (self._moved_task is None or self._moved_task.done()):
            self._moved_task = asyncio.ensure_future(self._announce_moves())
            self._moved_task.set_name("pymq-client-masters-moved")

    async def _announce_moves(self) -> None:
        while self._moved:
            moved, self._moved = self._moved, set()
            try:
                await self._masters_moved(moved)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("masters_moved_failed")

    async def _masters_moved(self, moved: set[str]) -> None:
        """New masters (an election): heartbeat at once, so they know this client's groups, then
        tell the consumers (orderly ones lock their queues there) and rebalance."""
        log.info("masters_moved", brokers=sorted(moved))
        await self.send_heartbeat_to_all()
        for consumer in list(self.consumers.values()):
            try:
                await consumer.masters_moved(moved)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("masters_moved_failed", group=consumer.group)
        self.trigger_rebalance()

    def broker_addr(self, broker_name: str, *, master_only: bool = True) -> str | None:
        return self.routes.broker_addr(broker_name, master_only=master_only)

    def all_broker_addrs(self) -> list[str]:
        return self.routes.all_broker_addrs()

    # --- heartbeats --------------------------------------------------------------------------------------

    def heartbeat(self) -> Command:
        """One HEART_BEAT for every broker: this client's producer groups and consumers."""
        consumers = [d for c in self.consumers.values() if (d := c.heartbeat_data())]
        return broker_api.heartbeat(self.client_id, list(self.producers), consumers)

    async def send_heartbeat_to_all(self) -> None:
        if not self.producers and not self.consumers:
            return
        cmd = self.heartbeat()
        has_consumers = bool(self.consumers)

        async def one(addr: str) -> None:
            try:
                await self.rpc.invoke_ok(addr, cmd, self.config.rpc_timeout_seconds)
            except PymqError as exc:
                log.debug("heartbeat_failed", broker=addr, reason=str(exc))
                self.note_failure(exc)

        targets = []
        for addrs in self.routes.broker_addrs.values():
            for bid, addr in addrs.items():
                if bid == MASTER_ID or has_consumers:
                    targets.append(addr)
        await asyncio.gather(*(one(a) for a in sorted(set(targets))))

    async def unregister(self, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        async def one(addr: str) -> None:
            cmd = broker_api.unregister_client(self.client_id, producer_group, consumer_group)
            with contextlib.suppress(PymqError):
                await self.rpc.invoke_ok(addr, cmd, 2.0)

        await asyncio.gather(*(one(a) for a in self.all_broker_addrs()))

    # --- consumers: rebalance and offsets -------------------------------------------------------------

    def trigger_rebalance(self) -> None:
        self._rebalance_now.set()

    async def _rebalance_loop(self) -> None:
        """Rebalance every ``rebalance_interval_seconds`` of the clock, and at once when triggered."""
        while True:
            interval = asyncio.ensure_future(self.clock.sleep(self.config.rebalance_interval_seconds))
            triggered = asyncio.ensure_future(self._rebalance_now.wait())
            try:
                await asyncio.wait((interval, triggered), return_when=asyncio.FIRST_COMPLETED)
            finally:
                interval.cancel()
                triggered.cancel()
            self._rebalance_now.clear()
            await self.rebalance_all()

    async def rebalance_all(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.rebalance()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("rebalance_failed", group=consumer.group)

    async def persist_offsets(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.persist_offsets()
            except PymqError as exc:
                log.warning("offset_persist_failed", group=consumer.group, reason=str(exc))

    async def consumer_ids(self, group: str, topic: str) -> list[str]:
        """The group's members as one broker of ``topic`` knows them."""
        route = await self.routes.get(topic)
        if route is None:
            return []
        for bd in sorted(route.brokerDatas, key=lambda b: b.brokerName):
            addr = bd.select_addr()
            if addr is None:
                continue
            try:
                resp = await self.rpc.invoke_ok(
                    addr,
                    broker_api.consumer_group(RequestCode.GET_CONSUMER_LIST_BY_GROUP, group),
                    self.config.rpc_timeout_seconds,
                )
            except PymqError:
                continue
            return sorted(decode_body(resp.body).get("consumerIdList", []))
        return []

    def _on_ids_changed(self, cmd: Command, channel: Channel) -> None:
        log.debug("consumer_ids_changed", group=ConsumerGroupRequest.from_ext(cmd.ext).consumer_group)
        self.trigger_rebalance()
        return None

    def _on_reset_offset(self, cmd: Command, channel: Channel) -> None:
        consumer = self.consumers.get(ResetOffsetRequest.from_ext(cmd.ext).group)
        if consumer is None:
            return None
        body = decode_body(cmd.body, "offset reset")
        table = {MessageQueue.from_dict(mq): int(off) for mq, off in body.get("offsetTable", [])}
        consumer.reset_offsets(table)
        return None

    def _on_check_transaction(self, cmd: Command, channel: Channel) -> None:
        """A broker asks about a half message: hand it to the transaction producer of its group."""
        try:
            header = CheckTransactionStateRequest.from_ext(cmd.ext)
            msg = decode_message(cmd.body_bytes())
        except PymqError as exc:
            log.warning("transaction_check_unreadable", broker=channel.remote_addr, reason=str(exc))
            return None
        group = msg.properties.get(PGROUP, "")
        check = getattr(self.producers.get(group), "check_transaction_state", None)
        if check is None:
            log.warning("transaction_check_no_producer", group=group, broker=channel.remote_addr)
            return None
        check(channel.remote_addr, header, msg)
        return None

    def _no_consumer(self, cmd: Command, group: str) -> Command:
        """The answer to a relayed request for a group this client does not consume in."""
        why = f"client {self.client_id} has no consumer of group {group}"
        return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, why)

    def _on_running_info(self, cmd: Command, channel: Channel) -> Command:
        """A broker relays an admin's GET_CONSUMER_RUNNING_INFO: the group's consumer describes itself.

        Answered inline on the loop from in-memory state (no I/O; the stacks are bounded text).
        """
        header = ConsumerRunningInfoRequest.from_ext(cmd.ext)
        consumer = self.consumers.get(header.consumer_group)
        if consumer is None:
            return self._no_consumer(cmd, header.consumer_group)
        if header.client_id != self.client_id:
            log.warning("running_info_other_client_id", asked=header.client_id, client_id=self.client_id)
        info = consumer.running_info(self.client_id, jstack=header.jstack_enable)
        return cmd.response(body=encode_body(info))

    async def _on_consume_directly(self, cmd: Command, channel: Channel) -> Command:
        """A broker relays an admin's CONSUME_MESSAGE_DIRECTLY: the group's push consumer runs its listener
        on the stored message in the body (see :mod:`pymq.client.consume_directly`)."""
        header = ConsumeMessageDirectlyRequest.from_ext(cmd.ext)
        consumer = self.consumers.get(header.consumer_group)
        if consumer is None:
            return self._no_consumer(cmd, header.consumer_group)
        consume = getattr(consumer, "consume_message_directly", None)
        if consume is None:
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"the consumer of group {header.consumer_group} on {self.client_id} has no listener "
                f"({type(consumer).__name__})",
            )
        try:
            msg = decode_message(cmd.body_bytes(), broker_name=header.broker_name or "")
        except PymqError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the message sent is unreadable: {exc}")
        result = await consume(msg, self.client_id)
        return cmd.response(body=encode_body(result))
