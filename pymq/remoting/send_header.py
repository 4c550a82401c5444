"""SendMessageRequestHeader of RocketMQ 4.9, read from a SEND_MESSAGE (10) or SEND_MESSAGE_V2 (310) command.

V2 carries the same fields under one-letter names ``a``..``n``; both decode to one
:class:`SendMessageRequestHeader`. Values arrive as strings: integers are parsed as Java's
``Integer/Long.parseInt``, booleans as ``Boolean.parseBoolean`` (only ``"true"``, any case,
is true; the C++ client sends ``"0"``). A missing required field or an ill-typed value raises
:class:`HeaderFieldError` naming the field, to be answered with its code and remark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pymq.remoting.codes import RequestCode, ResponseCode
from pymq.remoting.command import RemotingCommand
from pymq.remoting.message_layout import parse_properties

__all__ = ["V2_NAMES", "HeaderFieldError", "SendMessageRequestHeader", "decode_send_header"]

#: SEND_MESSAGE_V2's short names -> SendMessageRequestHeader's (createSendMessageRequestHeaderV1).
V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}

_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)


class HeaderFieldError(ValueError):
    """A request header field is missing or ill-typed; ``code``/``remark`` make the response."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"the request header field {field} {reason}")
        self.field = field
        self.code = int(ResponseCode.INVALID_PARAMETER)
        self.remark = str(self)


@dataclass(slots=True)
class SendMessageRequestHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: dict[str, str]
    reconsume_times: int = 0
    unit_mode: bool = False
    max_reconsume_times: int | None = None
    batch: bool = False
    broker_name: str | None = None


def _req(ext: dict[str, str], name: str) -> str:
    v = ext.get(name)
    if v is None:
        raise HeaderFieldError(name, "is missing")
    return v


def _int(ext: dict[str, str], name: str, bounds: tuple[int, int], default: int | None = None) -> int:
    raw = ext.get(name)
    if raw is None:
        if default is None:
            raise HeaderFieldError(name, "is missing")
        return default
    if not _JAVA_INT.fullmatch(raw):
        raise HeaderFieldError(name, f"is not an integer: {raw[:40]!r}")
    v = int(raw)
    if not bounds[0] <= v <= bounds[1]:
        raise HeaderFieldError(name, f"is out of range: {v}")
    return v


def _bool(ext: dict[str, str], name: str) -> bool:
    return (ext.get(name) or "").lower() == "true"


def decode_send_header(cmd: RemotingCommand) -> SendMessageRequestHeader:
    """The send header of a SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request."""
    raw = cmd.ext_fields or {}
    if cmd.code == RequestCode.SEND_MESSAGE_V2 or (cmd.code == RequestCode.SEND_BATCH_MESSAGE and "a" in raw):
        ext = {V2_NAMES.get(k, k): v for k, v in raw.items()}
    else:
        ext = raw
    max_rt = ext.get("maxReconsumeTimes")
    return SendMessageRequestHeader(
        producer_group=_req(ext, "producerGroup"),
        topic=_req(ext, "topic"),
        default_topic=_req(ext, "defaultTopic"),
        default_topic_queue_nums=_int(ext, "defaultTopicQueueNums", _I32),
        queue_id=_int(ext, "queueId", _I32),
        sys_flag=_int(ext, "sysFlag", _I32),
        born_timestamp=_int(ext, "bornTimestamp", _I64),
        flag=_int(ext, "flag", _I32),
        properties=parse_properties(ext.get("properties")),
        reconsume_times=_int(ext, "reconsumeTimes", _I32, default=0),
        unit_mode=_bool(ext, "unitMode"),
        max_reconsume_times=None if max_rt is None else _int(ext, "maxReconsumeTimes", _I32),
        batch=_bool(ext, "batch"),
        broker_name=ext.get("brokerName"),
    )
