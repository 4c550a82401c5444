"""Sans-IO wire protocol: frames, codes, route data, the message record codec. No sockets here."""

from pymq.protocol.codes import LanguageCode, RequestCode, ResponseCode
from pymq.protocol.filter import Subscription, parse_tags
from pymq.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    Command,
    FrameDecoder,
    encode,
    encode_bytes,
)
from pymq.protocol.message import Message, MessageExt, Prop, UniqueIdGenerator, decode_message, iter_messages
from pymq.protocol.route import (
    MASTER_ID,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    MessageQueue,
    QueueData,
    TopicConfig,
    TopicRouteData,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "Command",
    "FrameDecoder",
    "LanguageCode",
    "Message",
    "MessageExt",
    "MessageQueue",
    "Prop",
    "QueueData",
    "RequestCode",
    "ResponseCode",
    "Subscription",
    "TopicConfig",
    "TopicRouteData",
    "UniqueIdGenerator",
    "decode_message",
    "encode",
    "encode_bytes",
    "iter_messages",
    "parse_tags",
]
