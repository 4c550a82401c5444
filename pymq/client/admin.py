"""Administration of a cluster: topics, brokers, consumer groups, messages, dead letters.

    async with AdminClient("127.0.0.1:9876") as admin:
        await admin.create_topic("orders", queues=8)
        print(await admin.topic_route("orders"))

Every method raises :mod:`pymq.errors` exceptions (never prints); ``pymq-admin`` is a thin
CLI over this class.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from pymq.client import admin_operator, broker_api
from pymq.client.namesrv import NamesrvClient, parse_addrs
from pymq.client.routes import read_queues
from pymq.client.running_info import parse_remoting_running_info
from pymq.client.security import Security
from pymq.errors import (
    ClientError,
    ConsumerNotOnlineError,
    NoRouteError,
    PymqError,
    QueryNotFoundError,
    TopicNotExistError,
)
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.protocol.message import MessageExt, iter_messages
from pymq.protocol.record import decode_offset_msg_id
from pymq.protocol.route import MASTER_ID, PERM_READ_WRITE, MessageQueue, TopicRouteData
from pymq.transport.client import RpcClient

#: consumer group used by admin reads (print-message, dlq-list)
ADMIN_GROUP = "PYMQ_ADMIN"


def _running_info_body(body: bytes) -> dict[str, Any]:
    """A GET_CONSUMER_RUNNING_INFO answer: msgpack from pymq's clients, JSON from RocketMQ 4.x ones."""
    try:
        info = decode_body(body, "running info")
        if isinstance(info, dict):
            return {**info, "format": "pymq"}
    except PymqError:
        pass
    text = body.decode("utf-8", "replace")
    try:  # RocketMQ's JSON keys mqTable by MessageQueue objects: not JSON, parsed leniently
        return {**parse_remoting_running_info(text), "format": "remoting"}
    except (ValueError, TypeError):
        return {"format": "remoting", "raw": text}


class AdminClient:
    def __init__(self, namesrv: str | list[str], *, timeout: float = 5.0, **security: Any) -> None:
        """``security``: access_key, secret_key, tls, tls_ca_file ... (see pymq.client.security)."""
        addrs = parse_addrs(namesrv)
        self.rpc = RpcClient(connect_timeout=timeout, **Security.from_options(security).rpc_options(addrs))
        self.ns = NamesrvClient(self.rpc, addrs, timeout)
        self.timeout = timeout

    async def close(self) -> None:
        await self.rpc.close()

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- plumbing ---------------------------------------------------------------------------------------

    async def broker_call(self, addr: str, cmd: Command, ok: tuple[int, ...] = (0,)) -> Command:
        """One request (built with :mod:`pymq.client.broker_api`) to one broker; raises the mapped
        error unless the answer's code is in ``ok``."""
        return await self.rpc.invoke_ok(addr, cmd, self.timeout, ok)

    async def cluster_info(self) -> dict[str, Any]:
        return await self.ns.cluster_info()

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName -> master address, for one cluster or all of them."""
        info = await self.cluster_info()
        names = info.get("clusterAddrTable", {}).get(cluster, []) if cluster else list(info.get("brokerAddrTable", {}))
        if cluster and not names:
            raise ClientError(f"cluster {cluster!r} is unknown to the nameserver")
        out = {}
        for name in names:
            addrs = info["brokerAddrTable"].get(name, {}).get("brokerAddrs", {})
            master = addrs.get(MASTER_ID) or addrs.get(str(MASTER_ID))
            if master:
                out[name] = master
        return out

    # --- topics -------------------------------------------------------------------------------------------

    async def topic_list(self) -> list[str]:
        return await self.ns.topics()

    async def topic_route(self, topic: str) -> TopicRouteData:
        return await self.ns.route(topic)

    async def create_topic(
        self,
        topic: str,
        queues: int = 8,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        perm: int = PERM_READ_WRITE,
        order: bool = False,
        attributes: dict[str, str] | None = None,
    ) -> list[str]:
        """Create (or update) a topic on one broker or every master of a cluster; returns the addresses.

        ``attributes``: RocketMQ 5 topic attributes, e.g. ``{"priority.levels": "10"}`` (a priority topic)."""
        targets = [broker_addr] if broker_addr else list((await self.master_addrs(cluster)).values())
        if not targets:
            raise ClientError("no master broker to create the topic on")

        def request() -> Command:  # one command per broker (each request gets its own opaque)
            return broker_api.create_topic(topic, queues, perm=perm, order=order, attributes=attributes)

        await asyncio.gather(*(self.broker_call(a, request()) for a in targets))
        return targets

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete a topic from the masters that hold it, then from every nameserver."""
        masters = await self.master_addrs(cluster)
        route = await self.ns.route_or_none(topic)
        holders = [masters[q.brokerName] for q in (route.queueDatas if route else []) if q.brokerName in masters]
        for addr in holders:
            await self.broker_call(addr, broker_api.topic_request(RequestCode.DELETE_TOPIC_IN_BROKER, topic))
        for addr in self.ns.addrs:
            await self.rpc.invoke_ok(
                addr, broker_api.topic_request(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic), self.timeout
            )
        if route is None and not holders:
            raise TopicNotExistError(17, f"topic {topic} does not exist")
        return holders

    async def topic_configs(self, cluster: str | None = None) -> dict[str, dict[str, Any]]:
        """Every topic's config (queues, perm, order, attributes) as the masters hold it, by name.

        One GET_ALL_TOPIC_CONFIG per master; a topic on several brokers shows the first broker's
        config with ``brokers`` listing them all."""
        out: dict[str, dict[str, Any]] = {}
        for name, addr in sorted((await self.master_addrs(cluster)).items()):
            resp = await self.broker_call(addr, broker_api.plain(RequestCode.GET_ALL_TOPIC_CONFIG))
            for topic, config in (decode_body(resp.body).get("topicConfigTable") or {}).items():
                row = out.setdefault(topic, {**config, "brokers": []})
                row["brokers"].append(name)
        return out

    async def _queue_addrs(self, topic: str) -> list[tuple[MessageQueue, str]]:
        route = await self.topic_route(topic)
        out = []
        for mq in read_queues(topic, route):
            bd = route.broker(mq.brokerName)
            addr = bd.select_addr() if bd else None
            if addr:
                out.append((mq, addr))
        return out

    async def topic_status(self, topic: str) -> list[dict[str, Any]]:
        """Per queue: broker, min and max offset, last store time."""
        route = await self.topic_route(topic)
        rows: list[dict[str, Any]] = []
        for bd in sorted(route.brokerDatas, key=lambda b: b.brokerName):
            addr = bd.select_addr()
            if addr is None:
                continue
            resp = await self.broker_call(addr, broker_api.topic_request(RequestCode.GET_TOPIC_STATS_INFO, topic))
            for row in decode_body(resp.body).get("offsetTable", []):
                rows.append({"brokerAddr": addr, **row})
        return sorted(rows, key=lambda r: (r["brokerName"], r["queueId"]))

    # --- brokers ------------------------------------------------------------------------------------------

    async def broker_status(self, addr: str) -> dict[str, Any]:
        resp = await self.broker_call(addr, broker_api.plain(RequestCode.GET_BROKER_RUNTIME_INFO))
        status: dict[str, Any] = decode_body(resp.body)
        return status

    # --- timer messages (issue 17) ---

    async def pending_timers(
        self, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[dict[str, Any]]:
        """Pending timer messages per topic and master broker (GET_TIMER_METRICS), sorted by topic."""
        rows: list[dict[str, Any]] = []
        for addr in await self._targets(broker_addr, cluster):
            resp = await self.broker_call(addr, broker_api.plain(RequestCode.GET_TIMER_METRICS))
            for topic, metric in (decode_body(resp.body).get("timingCount") or {}).items():
                rows.append({"topic": topic, "brokerAddr": addr, "pending": int(metric.get("count", 0))})
        return sorted(rows, key=lambda r: (r["topic"], r["brokerAddr"]))

    async def _targets(self, broker_addr: str | None, cluster: str | None) -> list[str]:
        targets = [broker_addr] if broker_addr else list((await self.master_addrs(cluster)).values())
        if not targets:
            raise ClientError("no broker to send the update to")
        return targets

    async def update_broker_config(
        self, settings: dict[str, Any], *, broker_addr: str | None = None, cluster: str | None = None
    ) -> dict[str, dict[str, Any]]:
        out = {}
        for addr in await self._targets(broker_addr, cluster):
            resp = await self.broker_call(
                addr, broker_api.plain(RequestCode.UPDATE_BROKER_CONFIG, encode_body(settings))
            )
            out[addr] = decode_body(resp.body)
        return out

    async def update_subscription_group(
        self, config: dict[str, Any], *, broker_addr: str | None = None, cluster: str | None = None
    ) -> dict[str, dict[str, Any]]:
        out = {}
        for addr in await self._targets(broker_addr, cluster):
            resp = await self.broker_call(
                addr, broker_api.plain(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, encode_body(config))
            )
            out[addr] = decode_body(resp.body)
        return out

    # --- consumer groups ----------------------------------------------------------------------------------

    async def consumer_connection(self, group: str) -> dict[str, Any]:
        """Clients, subscriptions and message model of a group, as the first broker that knows it says."""
        last: PymqError | None = None
        for addr in (await self.master_addrs()).values():
            try:
                resp = await self.broker_call(
                    addr, broker_api.consumer_group(RequestCode.GET_CONSUMER_CONNECTION_LIST, group)
                )
            except PymqError as exc:
                last = exc
                continue
            connection: dict[str, Any] = decode_body(resp.body)
            return connection
        raise last or ClientError(f"no broker knows consumer group {group}")

    async def consumer_running_info(self, group: str, client_id: str, jstack: bool = False) -> dict[str, Any]:
        """One consumer client's running info (GET_CONSUMER_RUNNING_INFO, relayed by a broker it is connected
        to): properties, subscriptions, per owned queue its process state (``mqTable``) and, with ``jstack``,
        its threads' and asyncio tasks' stacks (``jstack``, text). ``brokerName`` says which broker relayed it.

        A RocketMQ 4.x client answers JSON: it is returned parsed when it parses, else as ``raw`` text.
        Raises :class:`~pymq.errors.ConsumerNotOnlineError` when no master knows that client.
        """
        last: PymqError | None = None
        for name, addr in sorted((await self.master_addrs()).items()):
            try:
                resp = await self.broker_call(addr, broker_api.consumer_running_info(group, client_id, jstack))
            except ConsumerNotOnlineError as exc:
                last = exc
                continue
            return {**_running_info_body(resp.body_bytes()), "brokerName": name}
        raise last or ClientError("no master broker to ask")

    async def group_list(self, cluster: str | None = None) -> dict[str, dict[str, Any]]:
        """Every subscription group's config as the masters hold it (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), by name;
        ``brokers`` lists the broker groups that know it."""
        out: dict[str, dict[str, Any]] = {}
        for name, addr in sorted((await self.master_addrs(cluster)).items()):
            resp = await self.broker_call(addr, broker_api.plain(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
            for group, config in (decode_body(resp.body).get("subscriptionGroupTable") or {}).items():
                row = out.setdefault(group, {**config, "brokers": []})
                row["brokers"].append(name)
        return out

    async def topic_traffic(self) -> dict[str, tuple[int, int]]:
        """``topic -> (messages in, messages out)`` summed over the masters since each started (GET_TOPIC_TRAFFIC)."""
        out: dict[str, tuple[int, int]] = {}
        for addr in (await self.master_addrs()).values():
            resp = await self.broker_call(addr, broker_api.plain(RequestCode.GET_TOPIC_TRAFFIC))
            for topic, (put, get) in (decode_body(resp.body).get("topics") or {}).items():
                seen = out.get(topic, (0, 0))
                out[topic] = (seen[0] + int(put), seen[1] + int(get))
        return out

    async def acl_accounts(self) -> dict[str, Any]:
        """The ACL accounts (rights, never secret keys) as the first master enforces them:
        ``{"enabled": bool, "accounts": [...], "brokerName": ...}``."""
        masters = sorted((await self.master_addrs()).items())
        if not masters:
            raise ClientError("no master broker to ask")
        name, addr = masters[0]
        resp = await self.broker_call(addr, broker_api.plain(RequestCode.GET_ACL_ACCOUNTS))
        return {**decode_body(resp.body), "brokerName": name}

    async def consume_message_directly(
        self, group: str, msg_id: str, client_id: str | None = None, topic: str | None = None
    ) -> dict[str, Any]:
        """A consumer client (None: any of the group's) consumes one stored message with its listener now
        (CONSUME_MESSAGE_DIRECTLY; see :func:`pymq.client.admin_operator.consume_message_directly`)."""
        return await admin_operator.consume_message_directly(self, group, msg_id, client_id, topic)

    async def consumer_offsets(self, broker_name: str) -> dict[str, dict[str, int]]:
        """Every group's committed offsets on one broker group's master (``"topic@group" -> {queueId: offset}``)."""
        return await admin_operator.consumer_offsets(self, broker_name)

    async def acl_update(self, account: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Create or replace an ACL account on every broker (see :func:`pymq.client.admin_operator.acl_update`)."""
        return await admin_operator.acl_update(self, account)

    async def acl_delete(self, access_key: str) -> dict[str, dict[str, Any]]:
        """Delete an ACL account on every broker (see :func:`pymq.client.admin_operator.acl_delete`)."""
        return await admin_operator.acl_delete(self, access_key)

    async def producer_connections(self) -> dict[str, list[dict[str, Any]]]:
        """Every producer group's connected clients (clientId, clientAddr, language, version, brokerName),
        from every master (a producer heartbeats to each broker it sends to)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for name, addr in sorted((await self.master_addrs()).items()):
            resp = await self.broker_call(addr, broker_api.plain(RequestCode.GET_ALL_PRODUCER_INFO))
            for group, conns in (decode_body(resp.body).get("producerTable") or {}).items():
                out.setdefault(group, []).extend({**c, "brokerName": name} for c in conns)
        return out

    async def consumer_progress(self, group: str, topic: str | None = None) -> dict[str, Any]:
        """Per queue: broker offset, consumer offset, lag, owning client and in-flight pop messages; plus totals."""
        rows: list[dict[str, Any]] = []
        for addr in (await self.master_addrs()).values():
            resp = await self.broker_call(addr, broker_api.consume_stats(group, topic or None))
            for row in decode_body(resp.body).get("offsetTable", []):
                consumer = row["consumerOffset"]
                row["lag"] = max(0, row["brokerOffset"] - max(consumer, 0))
                rows.append(row)
        rows.sort(key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
        return {
            "group": group,
            "queues": rows,
            "totalLag": sum(r["lag"] for r in rows),
            # pop consumption (SimpleConsumer): received, neither acked nor back yet
            "totalInFlight": sum(r.get("inFlight", 0) for r in rows),
        }

    async def reset_offset(self, group: str, topic: str, timestamp: int) -> dict[str, dict[str, int]]:
        """Move the group's offsets on ``topic`` to ``timestamp`` (ms; -1 latest, -2 earliest).

        Running consumers of the group are told by the broker and restart from there at once.
        """
        route = await self.topic_route(topic)
        out = {}
        for bd in route.brokerDatas:
            addr = bd.master_addr
            if addr is None:
                continue
            resp = await self.broker_call(addr, broker_api.reset_offset(group, topic, timestamp))
            out[bd.brokerName] = decode_body(resp.body).get("offsetTable", {})
        return out

    # --- messages -----------------------------------------------------------------------------------------

    async def query_key(
        self, topic: str, key: str, *, begin: int = 0, end: int | None = None, max_num: int = 32
    ) -> list[MessageExt]:
        """Messages of ``topic`` with a business key (or unique id), from every broker of the topic."""
        route = await self.topic_route(topic)
        out: list[MessageExt] = []
        for bd in route.brokerDatas:
            addr = bd.select_addr()
            if addr is None:
                continue
            try:
                resp = await self.broker_call(addr, broker_api.query_message(topic, key, max_num, begin, end or 2**62))
            except QueryNotFoundError:
                continue
            out.extend(iter_messages(_buffer(resp), broker_name=bd.brokerName))
        return sorted(out, key=lambda m: m.store_timestamp)

    async def query_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """A message by its offset id (broker address + commitlog offset), or by unique id with ``topic``."""
        try:
            addr, offset = decode_offset_msg_id(msg_id)
        except PymqError:
            addr, offset = "", -1
        if addr and not addr.startswith("0.0.0.0"):
            try:
                resp = await self.broker_call(addr, broker_api.view_message(offset))
                return next(iter_messages(_buffer(resp), broker_name=await self._broker_name(addr)))
            except (PymqError, StopIteration, OSError, OverflowError):
                # a unique id read as an offset id names no broker (OverflowError: its "port" is past 65535)
                if topic is None:
                    raise
        if topic is None:
            raise ClientError(f"{msg_id} is not an offset message id; pass the topic to look up a unique id")
        found = await self.query_key(topic, msg_id)
        if not found:
            raise QueryNotFoundError(22, f"no message with id {msg_id} in topic {topic}")
        return found[-1]

    async def _broker_name(self, addr: str) -> str:
        info = await self.cluster_info()
        for name, bd in info.get("brokerAddrTable", {}).items():
            if addr in bd.get("brokerAddrs", {}).values():
                return str(name)
        return ""

    async def read_queue(self, mq: MessageQueue, offset: int, count: int = 32) -> list[MessageExt]:
        """Up to ``count`` messages of one queue from ``offset`` (no group offsets are touched)."""
        route = await self.topic_route(mq.topic)
        bd = route.broker(mq.brokerName)
        addr = bd.select_addr() if bd else None
        if addr is None:
            raise NoRouteError(f"no broker {mq.brokerName} for topic {mq.topic}")
        resp = await self.rpc.invoke(
            addr, broker_api.pull_message(ADMIN_GROUP, mq, offset, max_nums=count), self.timeout
        )
        if resp.code == 21 and offset < int(resp.ext.get("minOffset", 0)):
            # Those offsets were cleaned up: start at the oldest one still there.
            return await self.read_queue(mq, int(resp.ext["minOffset"]), count)
        if resp.code != 0:
            return []
        return list(iter_messages(_buffer(resp), broker_name=mq.brokerName))

    async def messages_between(
        self, topic: str, begin_ms: int, end_ms: int, *, limit: int = 1000, per_queue: int = 256
    ) -> list[MessageExt]:
        """Messages of ``topic`` stored between ``begin_ms`` and ``end_ms`` (inclusive), oldest first.

        Each queue is read from the offset its broker finds for ``begin_ms`` (SEARCH_OFFSET_BY_TIMESTAMP),
        at most ``per_queue`` messages of each; the result is cut at ``limit``."""
        out: list[MessageExt] = []
        for mq, addr in await self._queue_addrs(topic):
            resp = await self.broker_call(
                addr, broker_api.queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic, mq.queueId, begin_ms)
            )
            offset = int(resp.ext.get("offset", 0))
            taken = 0
            while taken < per_queue:
                batch = await self.read_queue(mq, offset, min(32, per_queue - taken))
                kept = [m for m in batch if begin_ms <= m.store_timestamp <= end_ms]
                out.extend(kept)
                taken += len(batch)
                if not batch or batch[-1].store_timestamp > end_ms:
                    break
                offset = batch[-1].queue_offset + 1
        out.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset))
        return out[:limit]

    async def print_message(self, topic: str, queue_id: int, offset: int, broker: str | None = None) -> MessageExt:
        route = await self.topic_route(topic)
        names = [broker] if broker else sorted(q.brokerName for q in route.queueDatas)
        for name in names:
            msgs = await self.read_queue(MessageQueue(topic, name, queue_id), offset, 1)
            if msgs:
                return msgs[0]
        raise QueryNotFoundError(22, f"no message at {topic} queue {queue_id} offset {offset}")

    # --- dead letters ---------------------------------------------------------------------------------------

    async def dlq_list(self, group: str, limit: int = 1000) -> list[MessageExt]:
        """The messages in ``%DLQ%<group>`` (oldest first)."""
        topic = f"%DLQ%{group}"
        try:
            queues = await self._queue_addrs(topic)
        except TopicNotExistError:
            return []
        out: list[MessageExt] = []
        for mq, _addr in queues:
            offset = 0
            while len(out) < limit:
                batch = await self.read_queue(mq, offset, min(32, limit - len(out)))
                if not batch:
                    break
                out.extend(batch)
                offset = batch[-1].queue_offset + 1
        return out

    async def dlq_resend(self, group: str, msg_ids: list[str] | None = None) -> list[str]:
        """Send dead letters back to their original topic (all, or those with these ids); returns the ids.

        The dead-letter queue keeps its copy (it is the audit trail); the resent message gets a new
        id and carries the old one in ``DLQ_ORIGIN_MESSAGE_ID``.
        """
        from pymq.client.producer import Producer  # the admin client only needs a producer here
        from pymq.protocol.message import Message, Prop

        letters = await self.dlq_list(group)
        if msg_ids is not None:
            wanted = set(msg_ids)
            letters = [m for m in letters if m.msg_id in wanted or m.offset_msg_id in wanted]
            missing = wanted - {m.msg_id for m in letters} - {m.offset_msg_id for m in letters}
            if missing:
                raise QueryNotFoundError(22, f"not in %DLQ%{group}: {', '.join(sorted(missing))}")
        internal = {
            Prop.UNIQ_KEY, Prop.TAGS, Prop.KEYS, Prop.DELAY, Prop.RETRY_TOPIC, Prop.REAL_TOPIC, Prop.REAL_QID,
            Prop.ORIGIN_MESSAGE_ID, Prop.MAX_RECONSUME_TIMES, Prop.RECONSUME_TIME,
        }  # fmt: skip
        resent = []
        async with Producer(self.ns.addrs, "PYMQ_ADMIN_PRODUCER", instance_name="pymq-admin") as producer:
            for m in letters:
                topic = m.properties.get(Prop.RETRY_TOPIC) or m.topic
                props = {k: v for k, v in m.properties.items() if k not in internal}
                props[Prop.DLQ_ORIGIN_MESSAGE_ID] = m.msg_id
                await producer.send(Message(topic, m.body, tags=m.tags, keys=m.keys, properties=props, flag=m.flag))
                resent.append(m.msg_id)
        return resent

    # --- transactional messages ------------------------------------------------------------------------------

    async def pending_half_messages(
        self,
        group: str | None = None,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
        max_num: int = 1000,
    ) -> list[dict[str, Any]]:
        """Half messages still waiting for a commit or rollback (of one producer group, or all), per master.

        Each row: producerGroup, topic, queueId, msgId, keys, tags, halfOffset, originOffset,
        commitLogOffset, checkTimes, storeTimestamp and the brokerAddr that holds it.
        """
        rows: list[dict[str, Any]] = []
        for addr in await self._targets(broker_addr, cluster):
            resp = await self.broker_call(addr, broker_api.pending_half_messages(group, max_num))
            for row in decode_body(resp.body).get("pending", []):
                rows.append({**row, "brokerAddr": addr})
        return rows


def _buffer(resp: Command) -> bytes | memoryview:
    """A received body is one buffer (bytes or a view of the read buffer), never a list of them."""
    return cast(bytes | memoryview, resp.body)
