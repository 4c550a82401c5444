"""The admin's operator requests of issue 33's dashboard (also ``pymq-admin``): consume one message
directly on a consumer client, and edit the ACL accounts. :class:`~pymq.client.admin.AdminClient`'s
methods of the same names call these."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from pymq.client import broker_api
from pymq.errors import ClientError, PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.message import MessageExt
from pymq.protocol.record import decode_offset_msg_id
from pymq.protocol.route import MASTER_ID


class AdminClient(Protocol):
    """What these operations use of :class:`pymq.client.admin.AdminClient` (named here, not
    imported: admin.py imports this module)."""

    async def cluster_info(self) -> dict[str, Any]: ...

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]: ...

    async def broker_call(self, addr: str, cmd: Command, ok: tuple[int, ...] = (0,)) -> Command: ...

    async def query_id(self, msg_id: str, topic: str | None = None) -> MessageExt: ...


def directly_answer(body: bytes) -> dict[str, Any]:
    """A ConsumeMessageDirectlyResult: msgpack from pymq's clients, JSON from RocketMQ 4.x ones."""
    try:
        result = decode_body(body, "consume result")
        if isinstance(result, dict):
            return result
    except PymqError:
        pass
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"consumeResult": "UNKNOWN", "remark": text}
    return parsed if isinstance(parsed, dict) else {"consumeResult": "UNKNOWN", "remark": text}


async def consume_message_directly(
    admin: AdminClient, group: str, msg_id: str, client_id: str | None = None, topic: str | None = None
) -> dict[str, Any]:
    """Ask ``client_id`` (None: any connected client of ``group``) to consume the message ``msg_id`` (an
    offset id, or a unique id with ``topic``) with its listener now, through the broker that stores it.

    Returns the client's ConsumeMessageDirectlyResult (``consumeResult``: CR_SUCCESS, CR_LATER,
    CR_RETURN_NULL or CR_THROW_EXCEPTION; ``remark``; ``spentTimeMills``) with ``clientId``,
    ``brokerName``, ``msgId`` and ``offsetMsgId``. No offset moves: the group's progress is unchanged.
    Raises :class:`~pymq.errors.ConsumerNotOnlineError` when the client (or, with no client named, any
    client of the group) is not connected to that broker.
    """
    msg = await admin.query_id(msg_id, topic)
    masters = await admin.master_addrs()
    addr = masters.get(msg.broker_name) or decode_offset_msg_id(msg.offset_msg_id)[0]
    if not addr:
        raise ClientError(f"no broker stores {msg_id}")
    request = broker_api.consume_message_directly(group, client_id or "", msg.offset_msg_id, msg.topic)
    resp = await admin.broker_call(addr, request)
    return {
        "clientId": client_id or "",
        **directly_answer(resp.body_bytes()),
        "brokerName": msg.broker_name,
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "topic": msg.topic,
    }


async def _every_broker(admin: AdminClient) -> dict[str, str]:
    """``"brokerName/brokerId" -> address`` of every broker, masters first (each enforces its own ACL file)."""
    info = await admin.cluster_info()
    out: dict[str, str] = {}
    for name, bd in sorted((info.get("brokerAddrTable") or {}).items()):
        addrs = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
        for broker_id in sorted(addrs, key=lambda i: (i != MASTER_ID, i)):
            out[f"{name}/{broker_id}"] = addrs[broker_id]
    if not out:
        raise ClientError("no broker to ask")
    return out


async def _on_every_broker(admin: AdminClient, request: Callable[[], Command]) -> dict[str, dict[str, Any]]:
    """``request()`` to every broker; per broker its answer, or ``{"error": ...}`` when it refused (the other
    brokers are still asked: an ACL file one broker cannot write should not stop the rest). Raises the last
    error when every broker refused."""
    out: dict[str, dict[str, Any]] = {}
    last: PymqError | None = None
    for where, addr in (await _every_broker(admin)).items():
        try:
            resp = await admin.broker_call(addr, request())
        except PymqError as exc:
            out[where] = {"error": str(exc)}
            last = exc
            continue
        out[where] = decode_body(resp.body)
    if last is not None and all("error" in r for r in out.values()):
        raise last
    return out


async def acl_update(admin: AdminClient, account: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Create or replace one ACL account (RocketMQ's PlainAccessConfig names: accessKey, secretKey, admin,
    defaultTopicPerm, defaultGroupPerm, topicPerms, groupPerms, whiteRemoteAddress; no secretKey keeps an
    existing account's) in every broker's ACL file; per broker, its answer (``created``) or ``error``."""
    return await _on_every_broker(admin, lambda: broker_api.acl_update(account))


async def acl_delete(admin: AdminClient, access_key: str) -> dict[str, dict[str, Any]]:
    """Delete one ACL account from every broker's ACL file; per broker, its answer (``deleted``: it was there)
    or ``error``."""
    return await _on_every_broker(admin, lambda: broker_api.acl_delete(access_key))


async def consumer_offsets(admin: AdminClient, broker_name: str) -> dict[str, dict[str, int]]:
    """Every group's committed offsets on one broker group's master (GET_ALL_CONSUMER_OFFSET):
    ``"topic@group" -> {"queueId": offset}``."""
    addr = (await admin.master_addrs()).get(broker_name)
    if addr is None:
        raise ClientError(f"broker group {broker_name!r} has no master")
    resp = await admin.broker_call(addr, broker_api.plain(RequestCode.GET_ALL_CONSUMER_OFFSET))
    table: dict[str, dict[str, int]] = decode_body(resp.body).get("offsetTable") or {}
    return table
