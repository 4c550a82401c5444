"""The MessagingService handlers: each maps its protobuf request onto pymq RPC to the brokers.

Stateless: every request carries what it needs (topic, group, receipt handle naming its
broker); routes and broker addresses come from the pymq client instance's route cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc

from pymq.client import broker_api
from pymq.client.producer import Producer
from pymq.errors import PymqError, error_for_response
from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.acks import ProxyAcks
from pymq.grpc_proxy.auth import GrpcAcl, settings_needs
from pymq.grpc_proxy.clients import ClientRegistry, metadata
from pymq.grpc_proxy.handlers import Malformed, generic_handler
from pymq.grpc_proxy.mapping import MappingError
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.settings import ProxySettings, effective_settings
from pymq.grpc_proxy.topic_types import TopicTypes
from pymq.protocol.codes import ResponseCode
from pymq.protocol.message import MessageExt, Prop, iter_messages
from pymq.protocol.requests import (
    DLQ_PREFIX,
    MAX_INVISIBLE_MS,
    MAX_POP_MSG_NUMS,
    MIN_INVISIBLE_MS,
    POP_INIT_MIN,
    RETRY_PREFIX,
    CheckTransactionStateRequest,
)
from pymq.protocol.transaction import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE

log = logging.getLogger("pymq.grpc_proxy")

_EMPTY = (ResponseCode.NO_MESSAGE, ResponseCode.POLLING_TIMEOUT)
#: commands a Telemetry stream may hold for a client that does not read them; past it, check-backs are dropped
_TELEMETRY_BACKLOG = 64
_TX_TYPES = {pb.COMMIT: TRANSACTION_COMMIT_TYPE, pb.ROLLBACK: TRANSACTION_ROLLBACK_TYPE}


class MessagingService:
    """apache.rocketmq.v2.MessagingService over pymq brokers, through one pymq producer's client instance."""

    def __init__(
        self,
        producer: Producer,
        advertised: tuple[str, int],
        settings: ProxySettings | None = None,
        acl: GrpcAcl | None = None,
    ) -> None:
        self.producer = producer
        #: checks each call's authorization header and permissions (None: ACL off)
        self.acl = acl
        self.advertised = advertised
        self.settings = settings or ProxySettings()
        #: topic -> outbound queues of the Telemetry streams of producer clients publishing it
        self._producers: dict[str, list[asyncio.Queue[spb.TelemetryCommand | None]]] = {}
        self._rr = 0
        #: topics a half message was sent to (the brokers were told this front end's producer group)
        self._tx_topics: set[str] = set()
        #: the 5.x clients registered with the brokers on their behalf
        self.clients = ClientRegistry(lambda: self._inst, expiry_s=self.settings.client_expiry_s)
        self._background: set[asyncio.Future[Any]] = set()
        #: AckMessage's acks, coalesced per group, broker and topic
        self.acks = ProxyAcks(self._invoke)
        #: topic -> the message types its message.type attribute accepts (SendMessage checks, QueryRoute tells)
        self.topic_types = TopicTypes(
            lambda: self._inst,
            ttl_s=self.settings.topic_config_ttl_s,
            unset_is_normal=self.settings.unset_message_type_is_normal,
        )

    @property
    def _inst(self) -> Any:
        inst = self.producer.instance
        assert inst is not None, "the proxy's producer is not started"
        return inst

    def _endpoints(self, asked: pb.Endpoints) -> pb.Endpoints:
        """The front end's endpoints: the access point the client used, else the advertised address."""
        if asked.addresses:
            return asked
        host, port = self.advertised
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=port)])

    async def _addr(self, broker: str, topic: str, code: int = pb.INVALID_RECEIPT_HANDLE) -> str:
        """The master address of ``broker``; MappingError(code) when no route names it."""
        inst = self._inst
        addr = cast(str | None, inst.broker_addr(broker))
        if addr is None and topic:
            await inst.update_route(topic)
            addr = inst.broker_addr(broker)
        if addr is None:
            names: dict[int, str] = {
                pb.INVALID_RECEIPT_HANDLE: "receipt_handle",
                pb.INVALID_TRANSACTION_ID: "transaction_id",
            }
            what = names.get(code, "message_queue.broker.name")
            raise MappingError(code, f"{what} names broker {broker!r}, which serves no {topic!r}")
        return addr

    async def _invoke(self, addr: str, cmd: Any, extra_s: float = 0.0) -> Any:
        inst = self._inst
        return await inst.rpc.invoke(addr, cmd, inst.config.rpc_timeout_seconds + extra_s)

    # --- routes and clients ----------------------------------------------------------------------------------

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        topic = request.topic.name
        if not topic:
            return spb.QueryRouteResponse(status=mapping.status(pb.ILLEGAL_TOPIC, "topic.name is empty"))
        try:
            route = await self._inst.update_route(topic)
        except PymqError as exc:
            return spb.QueryRouteResponse(status=mapping.error_status(exc))
        if route is None or not route.queueDatas:
            return spb.QueryRouteResponse(status=mapping.status(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        types = await self.topic_types.accepted(topic)
        queues = mapping.route_queues(request.topic, route, self._endpoints(request.endpoints), types)
        return spb.QueryRouteResponse(status=mapping.status(), message_queues=queues)

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context: Any) -> spb.QueryAssignmentResponse:
        """Pop-mode assignments: one readable queue per broker (the broker picks the real queue on each pop)."""
        topic = request.topic.name
        if not topic or not request.group.name:
            code = pb.ILLEGAL_TOPIC if not topic else pb.ILLEGAL_CONSUMER_GROUP
            return spb.QueryAssignmentResponse(status=mapping.status(code, "topic.name and group.name are required"))
        try:
            route = await self._inst.update_route(topic)
        except PymqError as exc:
            return spb.QueryAssignmentResponse(status=mapping.error_status(exc))
        if route is None or not route.queueDatas:
            return spb.QueryAssignmentResponse(
                status=mapping.status(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            )
        types = await self.topic_types.accepted(topic)
        queues = mapping.route_queues(request.topic, route, self._endpoints(request.endpoints), types)
        seen: set[str] = set()
        out = []
        for q in queues:
            if q.broker.name not in seen and q.permission in (pb.READ, pb.READ_WRITE):
                seen.add(q.broker.name)
                out.append(pb.Assignment(message_queue=q))
        return spb.QueryAssignmentResponse(status=mapping.status(), assignments=out)

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        """OK for a known client type, and the client's registration with the brokers renewed (see clients.py);
        a consumer's heartbeat names its group."""
        if request.client_type not in _CLIENT_TYPES:
            return spb.HeartbeatResponse(status=_unrecognized(request.client_type))
        if request.client_type != pb.PRODUCER and not request.group.name:
            return spb.HeartbeatResponse(status=mapping.status(pb.ILLEGAL_CONSUMER_GROUP, "group.name is empty"))
        client_id = metadata(context).get("x-mq-client-id", "")
        if client_id:
            await self.clients.heartbeat(client_id, request.client_type, request.group.name)
        return spb.HeartbeatResponse(status=mapping.status())

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        """The client is shutting down: unregister it from the brokers."""
        client_id = metadata(context).get("x-mq-client-id", "")
        if client_id:
            await self.clients.remove(client_id, "it notified its termination")
        return spb.NotifyClientTerminationResponse(status=mapping.status())

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """Settings in, effective settings out; a producer's stream also carries its topics' transaction
        check-backs (RecoverOrphanedTransactionCommand). Open until the client ends it."""
        out: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue(maxsize=_TELEMETRY_BACKLOG)
        topics: list[str] = []
        headers = metadata(context)
        client_id = headers.get("x-mq-client-id", "")
        counted: list[bool] = []  # this stream counts for its client (after its first settings)
        if self.acl is not None and (refused := self.acl.check_needs([], context)) is not None:
            yield spb.TelemetryCommand(status=refused)
            return

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    if isinstance(cmd, Malformed):
                        await out.put(spb.TelemetryCommand(status=cmd.status))
                        continue
                    kind = cmd.WhichOneof("command")
                    if kind == "settings" and cmd.settings.client_type not in _CLIENT_TYPES:
                        await out.put(spb.TelemetryCommand(status=_unrecognized(cmd.settings.client_type)))
                    elif (
                        kind == "settings"
                        and self.acl is not None
                        and (refused := self.acl.check_needs(settings_needs(cmd.settings), context)) is not None
                    ):
                        await out.put(spb.TelemetryCommand(status=refused))
                    elif kind == "settings":
                        if cmd.settings.client_type == pb.PRODUCER:
                            self._unregister(out, topics)
                            topics[:] = [t.name for t in cmd.settings.publishing.topics]
                            for t in topics:
                                self._producers.setdefault(t, []).append(out)
                        await out.put(
                            spb.TelemetryCommand(
                                status=mapping.status(), settings=self.effective_settings(cmd.settings)
                            )
                        )
                        await self._register_client(client_id, headers, cmd.settings, counted)
                    elif kind is None:
                        await out.put(
                            spb.TelemetryCommand(
                                status=mapping.status(pb.BAD_REQUEST, "telemetry command carries nothing")
                            )
                        )
            finally:
                await out.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await out.get()) is not None:
                yield item
        finally:
            reader.cancel()
            self._unregister(out, topics)
            if counted:
                self._spawn(self.clients.stream_closed(client_id))

    async def _register_client(
        self, client_id: str, headers: dict[str, str], settings: pb.Settings, counted: list[bool]
    ) -> None:
        if not client_id:
            return
        try:
            await self.clients.settings(client_id, headers, settings)
        except Exception:  # registration is for listings: it must not end the client's stream
            log.exception("registering 5.x client %s failed", client_id)
        if not counted:
            counted.append(True)
            self.clients.stream_opened(client_id)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _unregister(self, out: asyncio.Queue[Any], topics: list[str]) -> None:
        for t in topics:
            streams = self._producers.get(t, [])
            if out in streams:
                streams.remove(out)
            if not streams:
                self._producers.pop(t, None)

    def on_transaction_check(self, broker_addr: str, header: CheckTransactionStateRequest, msg: MessageExt) -> None:
        """A broker asks about a half message: ask a producer client of its topic over its Telemetry stream."""
        topic = msg.properties.get(Prop.REAL_TOPIC) or msg.topic
        streams = self._producers.get(topic)
        broker = self._broker_name(broker_addr)
        if not streams or broker is None:
            log.info("transaction check for %s (%s): no producer of the topic connected", topic, header.msg_id)
            return  # the broker asks again at its next check
        msg_id = header.msg_id or msg.msg_id
        tx_id = mapping.transaction_id(broker, header.tran_state_table_offset, header.commit_log_offset, msg_id)
        command = spb.RecoverOrphanedTransactionCommand(
            message=mapping.to_v2(msg, topic, None, 0), transaction_id=tx_id
        )
        self._rr += 1
        stream = streams[self._rr % len(streams)]
        try:
            stream.put_nowait(spb.TelemetryCommand(recover_orphaned_transaction_command=command))
        except asyncio.QueueFull:
            log.warning("transaction check for %s dropped: the producer's telemetry stream is not read", msg_id)

    def _broker_name(self, addr: str) -> str | None:
        for name, addrs in self._inst.routes.broker_addrs.items():
            if addr in addrs.values():
                return cast(str, name)
        return None

    def effective_settings(self, asked: pb.Settings) -> pb.Settings:
        """The client's settings with the server-side values filled in (see settings.effective_settings)."""
        return effective_settings(self.settings, asked)

    # --- send ----------------------------------------------------------------------------------------------------

    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        if not request.messages:
            return spb.SendMessageResponse(status=mapping.status(pb.BAD_REQUEST, "messages is empty"))
        entries = [await self._send_one(m) for m in request.messages]
        codes = {e.status.code for e in entries}
        if len(codes) == 1:
            overall = entries[0].status
        else:
            overall = mapping.status(pb.MULTIPLE_RESULTS, "the messages had different results")
        return spb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, m: pb.Message) -> spb.SendResultEntry:
        try:
            out = mapping.to_pymq(m, self.settings.max_body_size)
            topic = out.message.topic
            if not topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):  # as RocketMQ: retry and DLQ topics unchecked
                mapping.check_type(out, await self.topic_types.accepted(topic))
            if out.message_type == pb.TRANSACTION:
                mapping.mark_transactional(out, m.system_properties, self.producer.group)
            queue = None
            if out.message_group is not None:
                queues = await self.producer.queues_for(out.message.topic)
                if not queues:
                    raise MappingError(pb.TOPIC_NOT_FOUND, f"topic {out.message.topic} has no writable queue")
                queue = queues[zlib.crc32(out.message_group.encode()) % len(queues)]
            result = await self.producer.send(out.message, queue=queue)
        except (MappingError, PymqError, TimeoutError) as exc:
            return spb.SendResultEntry(status=mapping.error_status(exc), message_id=m.system_properties.message_id)
        tx_id = ""
        if out.message_type == pb.TRANSACTION and out.message.topic not in self._tx_topics:
            # as pymq's TransactionProducer: the topic's brokers must know this group before they check back
            self._tx_topics.add(out.message.topic)
            await self._inst.send_heartbeat_to_all()
        if out.message_type == pb.TRANSACTION and result.commit_log_offsets:
            broker = result.message_queue.brokerName
            tx_id = mapping.transaction_id(broker, result.queue_offset, result.commit_log_offsets[0], result.msg_id)
        return spb.SendResultEntry(
            status=mapping.status(), message_id=result.msg_id, offset=result.queue_offset, transaction_id=tx_id
        )

    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Any) -> spb.EndTransactionResponse:
        """Commit or roll back the half message the transaction id names (oneway to its broker, as pymq's SDK does)."""
        try:
            topic = request.topic.name
            if not topic:
                raise MappingError(pb.ILLEGAL_TOPIC, "topic.name is empty")
            tx_type = _TX_TYPES.get(request.resolution)
            if tx_type is None:
                raise MappingError(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
            broker, queue_offset, clog_offset, msg_id = mapping.parse_transaction_id(request.transaction_id)
            addr = await self._addr(broker, topic, pb.INVALID_TRANSACTION_ID)
            cmd = broker_api.end_transaction(
                self.producer.group,
                queue_offset,
                clog_offset,
                tx_type,
                msg_id=msg_id,
                from_check=request.source == pb.SOURCE_SERVER_CHECK,
                topic=topic,
            )
            await self._inst.rpc.invoke_oneway(addr, cmd)
        except (MappingError, PymqError, TimeoutError) as exc:
            return spb.EndTransactionResponse(status=mapping.error_status(exc))
        return spb.EndTransactionResponse(status=mapping.status())

    # --- receive, ack, invisible time --------------------------------------------------------------------------

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """Pop from the queue's broker, long polling up to the requested time; status last (OK or MESSAGE_NOT_FOUND)."""
        try:
            msgs = await self._receive(request, context)
        except (MappingError, PymqError, TimeoutError) as exc:
            yield spb.ReceiveMessageResponse(status=mapping.error_status(exc))
            return
        if not msgs:
            yield spb.ReceiveMessageResponse(status=mapping.status(pb.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield spb.ReceiveMessageResponse(delivery_timestamp=mapping.timestamp(int(time.time() * 1000)))
        for m in msgs:
            yield spb.ReceiveMessageResponse(message=m)
        yield spb.ReceiveMessageResponse(status=mapping.status())

    async def _receive(self, request: spb.ReceiveMessageRequest, context: Any) -> list[pb.Message]:
        group, topic = request.group.name, request.message_queue.topic.name
        if not group:
            raise MappingError(pb.ILLEGAL_CONSUMER_GROUP, "group.name is empty")
        if not topic:
            raise MappingError(pb.ILLEGAL_TOPIC, "message_queue.topic.name is empty")
        if not 1 <= request.batch_size <= MAX_POP_MSG_NUMS:
            raise MappingError(pb.BAD_REQUEST, f"batch_size must be 1..{MAX_POP_MSG_NUMS}, got {request.batch_size}")
        invisible_ms = (
            mapping.millis(request.invisible_duration)
            if request.HasField("invisible_duration")
            else self.settings.default_invisible_ms
        )
        if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
            raise MappingError(
                pb.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration must be {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms, got {invisible_ms}",
            )
        poll_ms = (
            mapping.millis(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else self.settings.long_polling_ms
        )
        if poll_ms < 0:
            raise MappingError(pb.ILLEGAL_POLLING_TIME, f"long_polling_timeout must be >= 0, got {poll_ms} ms")
        remaining = context.time_remaining() if context is not None else None
        if remaining is not None:  # answer (empty) before the client's deadline, not after it
            poll_ms = max(0, min(poll_ms, int(remaining * 1000) - 1000))
        expr = "*"
        fe = request.filter_expression
        if fe.type == pb.SQL:
            raise MappingError(pb.ILLEGAL_FILTER_EXPRESSION, "SQL filter expressions are not supported")
        if fe.expression:
            expr = fe.expression
        broker = request.message_queue.broker.name
        if self._inst.routes.route(topic) is None and await self._inst.update_route(topic) is None:
            raise MappingError(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        addr = await self._addr(broker, topic, pb.BAD_REQUEST)
        cmd = broker_api.pop_message(
            group,
            topic,
            expr,
            max_nums=request.batch_size,
            invisible_ms=invisible_ms,
            poll_ms=poll_ms,
            born_time=int(time.time() * 1000),
            init_mode=POP_INIT_MIN,
        )
        resp = await self._invoke(addr, cmd, poll_ms / 1000)
        if resp.code in _EMPTY:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise error_for_response(resp.code, resp.remark, addr)
        handles = broker_api.read_pop_handles(resp)
        out = []
        ns = request.group.resource_namespace
        for m, handle in zip(iter_messages(resp.body, broker_name=broker), handles, strict=False):
            real_topic = m.topic
            if real_topic.startswith(RETRY_PREFIX):
                real_topic = m.properties.get(Prop.RETRY_TOPIC) or topic
            wrapped = mapping.wrap_handle(broker, handle, m.commitlog_offset)
            out.append(mapping.to_v2(m, real_topic, wrapped, invisible_ms, ns))
        return out

    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        group, topic = request.group.name, request.topic.name
        if not group or not topic:
            code = pb.ILLEGAL_CONSUMER_GROUP if not group else pb.ILLEGAL_TOPIC
            return spb.AckMessageResponse(status=mapping.status(code, "group.name and topic.name are required"))

        async def ack(e: Any) -> spb.AckMessageResultEntry:
            try:
                broker, handle = mapping.unwrap_handle(e.receipt_handle)
                await self.acks.ack(await self._addr(broker, topic), group, topic, handle)
                st = mapping.status()
            except (MappingError, PymqError, TimeoutError) as exc:
                st = mapping.error_status(exc)
            return spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st)

        # (concurrently: the entries of one call, and the calls of all clients, share batch acks)
        results = list(await asyncio.gather(*(ack(e) for e in request.entries)))
        codes = {r.status.code for r in results}
        if not results:
            overall = mapping.status(pb.BAD_REQUEST, "entries is empty")
        elif len(codes) == 1:
            overall = results[0].status
        else:
            overall = mapping.status(pb.MULTIPLE_RESULTS, "the entries had different results")
        return spb.AckMessageResponse(status=overall, entries=results)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        group, topic = request.group.name, request.topic.name
        try:
            if not group:
                raise MappingError(pb.ILLEGAL_CONSUMER_GROUP, "group.name is empty")
            if not topic:
                raise MappingError(pb.ILLEGAL_TOPIC, "topic.name is empty")
            ms = mapping.millis(request.invisible_duration)
            if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
                raise MappingError(
                    pb.ILLEGAL_INVISIBLE_TIME, f"invisible_duration must be {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms"
                )
            broker, handle, clog = mapping.unwrap_handle_offset(request.receipt_handle)
            addr = await self._addr(broker, topic)
            resp = await self._invoke(addr, broker_api.change_invisible_time(group, topic, handle, ms))
            if resp.code != ResponseCode.SUCCESS:
                raise error_for_response(resp.code, resp.remark, addr)
            new = mapping.wrap_handle(broker, broker_api.read_new_handle(resp), clog)
        except (MappingError, PymqError, TimeoutError) as exc:
            return spb.ChangeInvisibleDurationResponse(status=mapping.error_status(exc))
        return spb.ChangeInvisibleDurationResponse(status=mapping.status(), receipt_handle=new)

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """As RocketMQ's proxy: send the received message back with a negative delay level (its broker
        stores it in ``%DLQ%<group>`` with its properties and origin), then ack its receipt handle."""
        group, topic = request.group.name, request.topic.name
        try:
            if not group:
                raise MappingError(pb.ILLEGAL_CONSUMER_GROUP, "group.name is empty")
            if not topic:
                raise MappingError(pb.ILLEGAL_TOPIC, "topic.name is empty")
            if not request.message_id:
                raise MappingError(pb.ILLEGAL_MESSAGE_ID, "message_id is empty")
            broker, handle, clog = mapping.unwrap_handle_offset(request.receipt_handle)
            if clog is None:
                raise MappingError(pb.INVALID_RECEIPT_HANDLE, "receipt_handle names no message (commit log offset)")
            addr = await self._addr(broker, topic)
            await self._check_handle_message(addr, clog, request.message_id, topic)
            cmd = broker_api.send_msg_back(
                group, clog, request.message_id, topic, delay_level=-1, max_reconsume_times=-1
            )
            resp = await self._invoke(addr, cmd)
            if resp.code != ResponseCode.SUCCESS:
                raise error_for_response(resp.code, resp.remark, addr)
            ack = await self._invoke(addr, broker_api.ack_message(group, topic, handle))
            if ack.code != ResponseCode.SUCCESS:  # dead-lettered; its pop checkpoint may still revive it once
                log.warning("dead-lettered %s but its ack failed: %s %s", request.message_id, ack.code, ack.remark)
        except (MappingError, PymqError, TimeoutError) as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=mapping.error_status(exc))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=mapping.status())

    async def _check_handle_message(self, addr: str, clog: int, message_id: str, topic: str) -> None:
        """The commit log offset a client hands back must hold the message it names, of the topic (or a
        retry copy of it): the offset is not covered by the broker's handle signature."""
        resp = await self._invoke(addr, broker_api.view_message(clog))
        m = None
        if resp.code == ResponseCode.SUCCESS:
            try:
                m = next(iter_messages(resp.body), None)
            except Exception:  # an offset inside a record reads as garbage
                m = None
        if m is not None:
            real = m.properties.get(Prop.RETRY_TOPIC) if m.topic.startswith(RETRY_PREFIX) else m.topic
            if m.msg_id == message_id and real == topic:
                return
        raise MappingError(pb.INVALID_RECEIPT_HANDLE, f"receipt_handle does not name message {message_id} of {topic}")


_CLIENT_TYPES = frozenset({pb.PRODUCER, pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER})


def _unrecognized(client_type: int) -> pb.Status:
    return mapping.status(
        pb.UNRECOGNIZED_CLIENT_TYPE,
        f"client_type {client_type} is not served (PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER)",
    )


def _no_topic(topic: str) -> pb.Status:
    return mapping.status(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist")


def add_to_server(service: MessagingService, server: grpc.aio.Server) -> None:
    server.add_generic_rpc_handlers((generic_handler(service),))


__all__ = ["MessagingService", "ProxySettings", "add_to_server"]
