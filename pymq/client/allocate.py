"""Consumer rebalance: which of a topic's queues this consumer should pull (RocketMQ's
``AllocateMessageQueueStrategy`` family), as pure functions with no I/O.

Every strategy sorts and de-duplicates its inputs itself — queues by (topic, brokerName,
queueId), consumer ids as strings — so that all members of a group, each computing its own
share from the same sets, agree on one partition without talking to each other.
"""

from __future__ import annotations

import bisect
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

from pymq.errors import ConfigError
from pymq.protocol.route import MessageQueue

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateStrategy",
    "md5_hash",
    "strategy_by_name",
]


class AllocateStrategy(ABC):
    """Splits a topic's queues among the consumers of a group.

    Subclasses implement :meth:`_allocate`, which receives sorted, de-duplicated inputs and
    the index of the current consumer (known to be present).
    """

    name: str = ""

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Iterable[MessageQueue],
        cid_all: Iterable[str],
    ) -> list[MessageQueue]:
        """The queues ``current_cid`` should consume; ``[]`` if it is not in ``cid_all``."""
        if not current_cid:
            raise ValueError("current_cid is empty")
        mqs = sorted(set(mq_all))
        cids = sorted({str(c) for c in cid_all})
        if current_cid not in cids:
            return []
        return self._allocate(consumer_group, current_cid, cids.index(current_cid), mqs, cids)

    @abstractmethod
    def _allocate(
        self, consumer_group: str, current_cid: str, index: int, mqs: list[MessageQueue], cids: list[str]
    ) -> list[MessageQueue]: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AllocateAveragely(AllocateStrategy):
    """Contiguous blocks: with N queues and C consumers the first ``N % C`` get one extra.

    8 queues, 3 consumers: c0 = q0-2, c1 = q3-5, c2 = q6-7. Surplus consumers get nothing.
    """

    name = "AVG"

    def _allocate(
        self, consumer_group: str, current_cid: str, index: int, mqs: list[MessageQueue], cids: list[str]
    ) -> list[MessageQueue]:
        n, c = len(mqs), len(cids)
        mod = n % c
        size = 1 if n <= c else n // c + (1 if index < mod else 0)
        start = index * size if index < mod else index * size + mod
        count = min(size, n - start)
        return [mqs[start + i] for i in range(max(count, 0))]


class AllocateAveragelyByCircle(AllocateStrategy):
    """Round robin: queue i goes to consumer ``i % C`` (c0 = {0, 3, 6}, c1 = {1, 4, 7}, c2 = {2, 5})."""

    name = "AVG_BY_CIRCLE"

    def _allocate(
        self, consumer_group: str, current_cid: str, index: int, mqs: list[MessageQueue], cids: list[str]
    ) -> list[MessageQueue]:
        return mqs[index :: len(cids)]


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: the first 4 bytes of MD5(key), big-endian, unsigned."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class AllocateConsistentHash(AllocateStrategy):
    """A hash ring with ``virtual_nodes`` points per consumer (keys ``f"{cid}-{i}"``).

    Each queue (key ``str(mq)``) goes to the first ring point at or after its hash, wrapping
    around. Uneven for small groups, but a consumer leaving only moves its own queues.
    """

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10, hash_func: Callable[[str], int] | None = None) -> None:
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self.hash_func = hash_func or md5_hash

    def _allocate(
        self, consumer_group: str, current_cid: str, index: int, mqs: list[MessageQueue], cids: list[str]
    ) -> list[MessageQueue]:
        # A dict filled in sorted-cid order: on a hash collision the later node wins, as in
        # RocketMQ's TreeMap-based router, so Java and Python clients agree.
        ring: dict[int, str] = {}
        for cid in cids:
            for i in range(self.virtual_nodes):
                ring[self.hash_func(f"{cid}-{i}")] = cid
        points = sorted(ring)
        result = []
        for mq in mqs:
            pos = bisect.bisect_left(points, self.hash_func(str(mq)))
            owner = ring[points[pos % len(points)]]
            if owner == current_cid:
                result.append(mq)
        return result

    def __repr__(self) -> str:
        return f"AllocateConsistentHash(virtual_nodes={self.virtual_nodes})"


class AllocateByMachineRoom(AllocateStrategy):
    """Only queues on brokers named ``room@x`` with ``room`` in ``consume_idcs``, split in
    blocks of ``P // C`` with the remainder dealt one each to the first consumers.

    8 queues in the room, 3 consumers: c0 = {0, 1, 6}, c1 = {2, 3, 7}, c2 = {4, 5}.
    """

    name = "MACHINE_ROOM"

    def __init__(self, consume_idcs: Iterable[str]) -> None:
        self.consume_idcs = frozenset(consume_idcs)

    def _allocate(
        self, consumer_group: str, current_cid: str, index: int, mqs: list[MessageQueue], cids: list[str]
    ) -> list[MessageQueue]:
        pre = [mq for mq in mqs if self._in_rooms(mq.brokerName)]
        c = len(cids)
        block, rem = divmod(len(pre), c)
        result = pre[index * block : index * block + block]
        if rem > index:
            result.append(pre[index + block * c])
        return result

    def _in_rooms(self, broker_name: str) -> bool:
        parts = broker_name.split("@")
        return len(parts) == 2 and parts[0] in self.consume_idcs

    def __repr__(self) -> str:
        return f"AllocateByMachineRoom(consume_idcs={sorted(self.consume_idcs)!r})"


class AllocateByConfig(AllocateStrategy):
    """A fixed list of queues, the same for every member of the group.

    As in RocketMQ the list is not checked against the topic's current queues.
    """

    name = "CONFIG"

    def __init__(self, message_queues: Iterable[MessageQueue]) -> None:
        self.message_queues = sorted(set(message_queues))

    def _allocate(
        self, consumer_group: str, current_cid: str, index: int, mqs: list[MessageQueue], cids: list[str]
    ) -> list[MessageQueue]:
        return list(self.message_queues)

    def __repr__(self) -> str:
        return f"AllocateByConfig(message_queues={self.message_queues!r})"


_STRATEGIES: tuple[type[AllocateStrategy], ...] = (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateConsistentHash,
    AllocateByMachineRoom,
    AllocateByConfig,
)

# RocketMQ's Java class names, so configs ported from a Java client keep working.
_JAVA_NAMES: dict[str, type[AllocateStrategy]] = {
    "allocatemessagequeueaveragely": AllocateAveragely,
    "allocatemessagequeueaveragelybycircle": AllocateAveragelyByCircle,
    "allocatemessagequeueconsistenthash": AllocateConsistentHash,
    "allocatemessagequeuebymachineroom": AllocateByMachineRoom,
    "allocatemessagequeuebyconfig": AllocateByConfig,
}

_BY_NAME: dict[str, type[AllocateStrategy]] = {
    **_JAVA_NAMES,
    **{cls.name.lower(): cls for cls in _STRATEGIES},
    **{cls.__name__.lower(): cls for cls in _STRATEGIES},
}


def strategy_by_name(name: str, **kwargs: object) -> AllocateStrategy:
    """Build a strategy from its short name (``AVG``, ``AVG_BY_CIRCLE``, ``CONSISTENT_HASH``,
    ``MACHINE_ROOM``, ``CONFIG``) or class name, case-insensitively; ``kwargs`` go to its
    constructor. Raises :class:`~pymq.errors.ConfigError` for unknown names or bad arguments.
    """
    cls = _BY_NAME.get(name.strip().lower())
    if cls is None:
        known = ", ".join(s.name for s in _STRATEGIES)
        raise ConfigError(f"unknown allocate strategy {name!r} (known: {known})")
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"bad arguments for allocate strategy {cls.name}: {e}") from e
