"""Route and topic data exchanged between brokers, nameservers and clients.

Field names follow RocketMQ's JSON (``brokerAddrs``, ``readQueueNums`` …) so the same
dicts can be produced from RocketMQ's own wire format later. Broker ids are ints here;
``0`` is the master, anything else a slave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MASTER_ID = 0

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
PERM_READ_WRITE = PERM_READ | PERM_WRITE


def perm_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def perm_writable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def perm_to_string(perm: int) -> str:
    return (
        ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + ("X" if perm & PERM_INHERIT else "-")
    )


def encode_attributes(attributes: dict[str, str]) -> str:
    """RocketMQ's wire form of topic attributes: ``+key=value,+key2=value2``."""
    return ",".join(f"+{k}={v}" for k, v in sorted(attributes.items()))


def parse_attributes(raw: str | None) -> dict[str, str]:
    """The attributes of ``+key=value,...`` (``-key`` entries, deletions, are left out); ValueError if malformed."""
    out: dict[str, str] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            continue
        key, eq, value = item.lstrip("+").partition("=")
        if not eq or not key:
            raise ValueError(f"topic attribute {item!r} is not +key=value")
        out[key] = value
    return out


@dataclass(slots=True)
class TopicConfig:
    """A topic as one broker holds it."""

    topicName: str
    readQueueNums: int = 8
    writeQueueNums: int = 8
    perm: int = PERM_READ_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False
    #: RocketMQ 5 topic attributes (e.g. ``priority.levels``, issue 17); only written when set
    attributes: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "topicName": self.topicName,
            "readQueueNums": self.readQueueNums,
            "writeQueueNums": self.writeQueueNums,
            "perm": self.perm,
            "topicFilterType": self.topicFilterType,
            "topicSysFlag": self.topicSysFlag,
            "order": self.order,
        }
        if self.attributes:
            d["attributes"] = dict(self.attributes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TopicConfig:
        return cls(
            topicName=str(d["topicName"]),
            readQueueNums=int(d.get("readQueueNums", 8)),
            writeQueueNums=int(d.get("writeQueueNums", 8)),
            perm=int(d.get("perm", PERM_READ_WRITE)),
            topicFilterType=str(d.get("topicFilterType", "SINGLE_TAG")),
            topicSysFlag=int(d.get("topicSysFlag", 0)),
            order=bool(d.get("order", False)),
            attributes={str(k): str(v) for k, v in (d.get("attributes") or {}).items()},
        )


@dataclass(slots=True)
class QueueData:
    """How many queues one broker group (brokerName) serves for a topic."""

    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int = PERM_READ_WRITE
    topicSysFlag: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerName": self.brokerName,
            "readQueueNums": self.readQueueNums,
            "writeQueueNums": self.writeQueueNums,
            "perm": self.perm,
            "topicSysFlag": self.topicSysFlag,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueueData:
        return cls(
            brokerName=str(d["brokerName"]),
            readQueueNums=int(d["readQueueNums"]),
            writeQueueNums=int(d["writeQueueNums"]),
            perm=int(d.get("perm", PERM_READ_WRITE)),
            topicSysFlag=int(d.get("topicSysFlag", d.get("topicSynFlag", 0))),
        )


@dataclass(slots=True)
class BrokerData:
    """One broker group: its cluster, name and the address of each member by broker id."""

    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str | None:
        return self.brokerAddrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """The master if alive, otherwise the lowest-id slave (for reads)."""
        if MASTER_ID in self.brokerAddrs:
            return self.brokerAddrs[MASTER_ID]
        for bid in sorted(self.brokerAddrs):
            return self.brokerAddrs[bid]
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "brokerName": self.brokerName, "brokerAddrs": dict(self.brokerAddrs)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BrokerData:
        return cls(
            cluster=str(d["cluster"]),
            brokerName=str(d["brokerName"]),
            brokerAddrs={int(k): str(v) for k, v in d.get("brokerAddrs", {}).items()},
        )


@dataclass(slots=True)
class TopicRouteData:
    """Everything a client needs to reach a topic: its queues per broker group and their addresses."""

    queueDatas: list[QueueData] = field(default_factory=list)
    brokerDatas: list[BrokerData] = field(default_factory=list)
    orderTopicConf: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "queueDatas": [q.to_dict() for q in self.queueDatas],
            "brokerDatas": [b.to_dict() for b in self.brokerDatas],
            "orderTopicConf": self.orderTopicConf,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TopicRouteData:
        return cls(
            queueDatas=[QueueData.from_dict(q) for q in d.get("queueDatas", [])],
            brokerDatas=[BrokerData.from_dict(b) for b in d.get("brokerDatas", [])],
            orderTopicConf=d.get("orderTopicConf"),
        )

    def broker(self, broker_name: str) -> BrokerData | None:
        for b in self.brokerDatas:
            if b.brokerName == broker_name:
                return b
        return None


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker group. Ordered by (topic, brokerName, queueId)."""

    topic: str
    brokerName: str
    queueId: int

    def __str__(self) -> str:
        return f"MessageQueue [topic={self.topic}, brokerName={self.brokerName}, queueId={self.queueId}]"

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "brokerName": self.brokerName, "queueId": self.queueId}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MessageQueue:
        return cls(str(d["topic"]), str(d["brokerName"]), int(d["queueId"]))
