"""What a 4.x producer sends, mapped to pymq's native requests and back (pure: no I/O).

* SEND_MESSAGE (10) / SEND_MESSAGE_V2 (310): the SendMessageRequestHeader and the body become
  one pymq record (:func:`pymq.protocol.record.encode_record`); properties keep RocketMQ's names
  (``TAGS``, ``KEYS``, ``UNIQ_KEY``, ``DELAY``, ``TRAN_MSG``, ``PGROUP`` are pymq's names too).
* SEND_BATCH_MESSAGE (320), or a send whose header says ``batch``: the body is
  MessageDecoder.encodeMessages' layout (per message ``i32 totalSize, i32 magic, i32 bodyCRC,
  i32 flag, i32+body, i16+properties``) and becomes one pymq record per message; as RocketMQ's
  CommitLog does, the header's properties are added to every message's.
* The native answer (``queueId``, ``queueOffset``, ``commitLogOffsets``) becomes
  SendMessageResponseHeader: ``msgId`` is the offsetMsgId (store host + commit-log offset),
  comma-joined for a batch; ``transactionId`` the UNIQ_KEY of a prepared message; ``MSG_REGION``
  and ``TRACE_ON`` as a 4.9 broker adds them.
* Response codes: those whose numbers and meaning agree pass; pymq's own (INVALID_PARAMETER
  213, ...) become SYSTEM_ERROR with their remark, which names the field.
* CHECK_TRANSACTION_STATE's body: the stored half message in MessageDecoder's layout, on its real
  topic and queue (as RocketMQ's check sends it).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pymq.errors import LocalProtocolError
from pymq.protocol.message import Prop
from pymq.protocol.record import encode_properties, encode_record, offset_msg_id, pack_host
from pymq.protocol.transaction import TRAN_MSG, TRANSACTION_TYPE_MASK
from pymq.remoting.codes import RequestCode, ResponseCode
from pymq.remoting.message_layout import decode_messages, encode_message, from_stored_records, parse_properties
from pymq.remoting.send_header import HeaderFieldError, SendMessageRequestHeader, decode_send_ext

__all__ = [
    "BatchEntry",
    "check_transaction_body",
    "decode_batch",
    "is_batch",
    "map_code",
    "parse_send",
    "records_of_send",
    "send_response_ext",
    "store_host_bytes",
    "well_formed_properties",
]

#: response codes a 4.x client reads with the same meaning as pymq's (the rest become SYSTEM_ERROR)
SHARED_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.MESSAGE_ILLEGAL,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.QUERY_NOT_FOUND,
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    }
)
#: send answers that stored the message (the header says where)
STORED_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
    }
)

_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
_I16 = struct.Struct(">h")
_OFFSET = struct.Struct(">q")  # offset_msg_id's commit-log offset
_SEP_NV, _SEP_P = "\x01", "\x02"
RETRY_PREFIX = "%RETRY%"
#: BrokerConfig.regionId's default in RocketMQ 4.9 (MixAll.DEFAULT_TRACE_REGION_ID)
DEFAULT_REGION = "DefaultRegion"


def map_code(code: int, remark: str | None) -> tuple[int, str | None]:
    """A native response code as a 4.x client reads it (pymq's own codes become SYSTEM_ERROR)."""
    if code in SHARED_CODES:
        return code, remark
    return int(ResponseCode.SYSTEM_ERROR), remark or f"pymq response code {code}"


def parse_send(code: int, ext: Mapping[str, str]) -> SendMessageRequestHeader:
    """The send header of a SEND_MESSAGE / V2 / SEND_BATCH_MESSAGE request; HeaderFieldError names a bad field."""
    return decode_send_ext(code, ext)


def is_batch(code: int, ext: Mapping[str, str], header: SendMessageRequestHeader) -> bool:
    """Whether the body holds MessageDecoder.encodeMessages' batch.

    SEND_BATCH_MESSAGE always does; a SEND_MESSAGE(_V2) does when its ``batch`` field says so.
    RocketMQ parses that field with Boolean.parseBoolean, but the C++ client writes a C++ bool
    (``"1"``): its batches then reach a RocketMQ broker as one message holding the encoded batch
    (rocketmq-client-cpp issues 189, 363, 447). ``"1"`` is taken as true here: no client sends it
    meaning anything else, and the batch is what the C++ client's caller asked for.
    """
    if code == RequestCode.SEND_BATCH_MESSAGE or header.batch:
        return True
    raw = ext.get("m" if code == RequestCode.SEND_MESSAGE_V2 else "batch")
    return raw is not None and raw.strip() == "1"


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: dict[str, str]


def decode_batch(body: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """The messages of a batch body (MessageDecoder.encodeMessages); HeaderFieldError('body', ...) if malformed."""
    view = memoryview(body)
    out: list[BatchEntry] = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < _BATCH_HEAD.size + 2:
            raise HeaderFieldError("body", f"holds a truncated batch message at byte {pos}")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        body_at = pos + _BATCH_HEAD.size
        if body_len < 0 or body_at + body_len + 2 > end:
            raise HeaderFieldError("body", f"batch message at byte {pos}: body length {body_len} overruns the body")
        (props_len,) = _I16.unpack_from(view, body_at + body_len)
        props_at = body_at + body_len + 2
        if props_len < 0 or props_at + props_len > end:
            raise HeaderFieldError("body", f"batch message at byte {pos}: properties length {props_len} overruns")
        if total != props_at + props_len - pos:
            raise HeaderFieldError(
                "body", f"batch message at byte {pos}: totalSize {total} != {props_at + props_len - pos}"
            )
        try:
            props = parse_properties(bytes(view[props_at : props_at + props_len]).decode())
        except UnicodeDecodeError:
            raise HeaderFieldError("body", f"batch message at byte {pos}: properties are not UTF-8") from None
        out.append(BatchEntry(flag, bytes(view[body_at : body_at + body_len]), props))
        pos = props_at + props_len
    if not out:
        raise HeaderFieldError("body", "holds no batch message")
    return out


def well_formed_properties(raw: str, parsed: dict[str, str]) -> bool:
    """Whether ``raw`` is exactly what :func:`properties_string` writes for ``parsed`` (in its own order):
    every entry one name, one ``\\x01``, one value and its ``\\x02``, no name twice or empty."""
    n = raw.count(_SEP_P)
    return n == len(parsed) and raw.count(_SEP_NV) == n and (not raw or raw[-1] == _SEP_P)


def _record(
    header: SendMessageRequestHeader,
    body: bytes,
    props: dict[str, str],
    flag: int,
    born: bytes,
    raw: str | None = None,
) -> bytes:
    """One record; ``raw``: the properties as sent, stored as they are when well formed (no re-encoding)."""
    if raw is not None and well_formed_properties(raw, props):
        encoded = raw.encode()
    else:
        try:
            encoded = encode_properties(props)
        except LocalProtocolError as exc:  # a separator byte inside a name or value
            raise HeaderFieldError("properties", str(exc)) from None
    try:
        return encode_record(
            header.topic.encode(),
            body,
            encoded,
            flag=flag,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=born,
            reconsume_times=header.reconsume_times,
        )
    except LocalProtocolError as exc:  # properties of more than 32767 bytes, a topic of more than 65535
        raise HeaderFieldError("properties" if "propert" in str(exc) else "topic", str(exc)) from None


def records_of_send(
    header: SendMessageRequestHeader, body: bytes, born_host: bytes, *, batch: bool, raw_properties: str | None = None
) -> bytes:
    """The pymq record(s) the broker's native SEND_MESSAGE stores for this request.

    ``raw_properties``: the header's properties string as sent; a single message stores it as it
    is when it is well formed (what re-encoding the parsed map would give, without the cost).
    """
    if not batch:
        props = header.properties
        if header.topic.startswith(RETRY_PREFIX) and header.max_reconsume_times is not None:
            # the Java client moves a retry's MAX_RECONSUME_TIMES property into the header: put it back
            # where the broker's retry policy reads it
            props = {**props, Prop.MAX_RECONSUME_TIMES: str(header.max_reconsume_times)}
            raw_properties = None
        return _record(header, body, props, header.flag, born_host, raw_properties)
    if header.topic.startswith(RETRY_PREFIX):
        raise BatchRefused("batch request does not support retry group")
    if header.sys_flag & TRANSACTION_TYPE_MASK or header.properties.get(TRAN_MSG, "").lower() == "true":
        raise BatchRefused("batch message does not support transaction")
    if header.properties.get(Prop.DELAY, "0") not in ("", "0"):
        raise BatchRefused("batch message does not support delay level")
    return b"".join(
        _record(header, e.body, {**e.properties, **header.properties}, e.flag, born_host) for e in decode_batch(body)
    )


class BatchRefused(ValueError):
    """A batch RocketMQ refuses with MESSAGE_ILLEGAL."""


def store_host_bytes(address: str) -> bytes:
    """The 8-byte store host of ``host:port`` (the broker's own address)."""
    host, _, port = address.rpartition(":")
    return pack_host(host, int(port or 0))


def send_response_ext(native: Mapping[str, Any], store_host: bytes, transaction_id: str | None) -> dict[str, str]:
    """SendMessageResponseHeader from the native answer's ext (``msgId`` comma-joined for a batch)."""
    offsets = native.get("commitLogOffsets") or []
    statuses = native.get("statuses")
    if statuses is not None:  # a partly stored batch: the stored ones (RocketMQ's batch is whole or nothing)
        offsets = [o for o, s in zip(offsets, statuses, strict=False) if s == 0]
    if len(offsets) == 1:  # a single send: no join
        msg_id = (store_host + _OFFSET.pack(int(offsets[0]))).hex().upper()
    else:
        msg_id = ",".join([offset_msg_id(store_host, int(o)) for o in offsets])
    ext = {
        "msgId": msg_id,
        "queueId": str(native.get("queueId", 0)),
        "queueOffset": str(native.get("queueOffset", -1)),
        # what a 4.9 broker adds to every send answer (the Java client's SendResult regionId / traceOn)
        "MSG_REGION": DEFAULT_REGION,
        "TRACE_ON": "true",
    }
    if transaction_id:
        ext["transactionId"] = transaction_id
    return ext


def check_transaction_body(stored: bytes | bytearray | memoryview) -> bytes:
    """CHECK_TRANSACTION_STATE's body: the stored half message in MessageDecoder's layout, on its real topic/queue."""
    msgs = decode_messages(from_stored_records(stored))
    out = []
    for m in msgs:
        real = m.properties.get(Prop.REAL_TOPIC)
        if real:
            m.topic = real
        qid = m.properties.get(Prop.REAL_QID, "")
        if qid.isdigit():
            m.queue_id = int(qid)
        out.append(encode_message(m))
    return b"".join(out)
