"""SendMessageRequestHeader of RocketMQ 4.9, read from a SEND_MESSAGE (10) or SEND_MESSAGE_V2 (310) command.

V2 carries the same fields under one-letter names ``a``..``n``; both decode to one
:class:`SendMessageRequestHeader`. Values arrive as strings: integers are parsed as Java's
``Integer/Long.parseInt``, booleans as ``Boolean.parseBoolean`` (only ``"true"``, any case,
is true; the C++ client sends ``"0"``). A missing required field or an ill-typed value raises
:class:`HeaderFieldError` naming the field, to be answered with its code and remark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pymq.remoting.codes import RequestCode, ResponseCode
from pymq.remoting.command import RemotingCommand
from pymq.remoting.message_layout import parse_properties

__all__ = ["V2_NAMES", "HeaderFieldError", "SendMessageRequestHeader", "decode_send_ext", "decode_send_header"]

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


def _int(ext: Mapping[str, str], key: str, name: str, bounds: tuple[int, int], default: int | None = None) -> int:
    """Field ``name``, sent under ``key`` (its V2 letter or its own name), as Java's parseInt/parseLong reads it."""
    raw = ext.get(key)
    if raw is None:
        if default is None:
            raise HeaderFieldError(name, "is missing")
        return default
    # the usual value: a few ASCII digits (isdigit alone would take other scripts' digits, as int() does)
    if raw.isascii() and raw.isdigit() and len(raw) < 10:
        return int(raw)
    if not _JAVA_INT.fullmatch(raw):
        raise HeaderFieldError(name, f"is not an integer: {raw[:40]!r}")
    v = int(raw)
    if not bounds[0] <= v <= bounds[1]:
        raise HeaderFieldError(name, f"is out of range: {v}")
    return v


#: the header's wire names, V1 (long) and V2 (one letter), in SendMessageRequestHeader's order
_V1 = (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch", "brokerName",
)  # fmt: skip
_V2 = tuple({long: short for short, long in V2_NAMES.items()}[n] for n in _V1)


def decode_send_ext(code: int, ext: Mapping[str, str]) -> SendMessageRequestHeader:
    """The send header of a SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request's extFields.

    The fields are read under the names the request uses (V2's letters, or V1's long names), with
    no renamed copy; a missing or ill-typed one raises :class:`HeaderFieldError` naming the field
    by its long name.
    """
    v2 = code == RequestCode.SEND_MESSAGE_V2 or (code == RequestCode.SEND_BATCH_MESSAGE and "a" in ext)
    k = _V2 if v2 else _V1
    get = ext.get
    group, topic, default_topic = get(k[0]), get(k[1]), get(k[2])
    if group is None:
        raise HeaderFieldError("producerGroup", "is missing")
    if topic is None:
        raise HeaderFieldError("topic", "is missing")
    if default_topic is None:
        raise HeaderFieldError("defaultTopic", "is missing")
    # the usual values (a few ASCII digits) are read inline; anything else goes to _int, which
    # parses it as Java does or names the field
    d, e, f, g, h, j = get(k[3]), get(k[4]), get(k[5]), get(k[6]), get(k[7]), get(k[9])
    max_rt = get(k[11])
    return SendMessageRequestHeader(
        group,
        topic,
        default_topic,
        int(d)
        if d is not None and d.isdigit() and d.isascii() and len(d) < 10
        else _int(ext, k[3], "defaultTopicQueueNums", _I32),
        int(e) if e is not None and e.isdigit() and e.isascii() and len(e) < 10 else _int(ext, k[4], "queueId", _I32),
        int(f) if f is not None and f.isdigit() and f.isascii() and len(f) < 10 else _int(ext, k[5], "sysFlag", _I32),
        int(g)
        if g is not None and g.isdigit() and g.isascii() and len(g) < 19
        else _int(ext, k[6], "bornTimestamp", _I64),
        int(h) if h is not None and h.isdigit() and h.isascii() and len(h) < 10 else _int(ext, k[7], "flag", _I32),
        parse_properties(get(k[8])),
        int(j)
        if j is not None and j.isdigit() and j.isascii() and len(j) < 10
        else _int(ext, k[9], "reconsumeTimes", _I32, default=0),
        (get(k[10]) or "").lower() == "true",
        None if max_rt is None else _int(ext, k[11], "maxReconsumeTimes", _I32),
        (get(k[12]) or "").lower() == "true",
        get(k[13]),
    )


def decode_send_header(cmd: RemotingCommand) -> SendMessageRequestHeader:
    """The send header of a SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request."""
    return decode_send_ext(cmd.code, cmd.ext_fields or {})
