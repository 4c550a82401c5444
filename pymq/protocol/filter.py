"""Tag expressions: ``*`` (everything) or ``TagA || TagB``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pymq.protocol.record import tag_hash

SUB_ALL = "*"


@dataclass(slots=True)
class Subscription:
    """One topic subscription of a consumer group (RocketMQ's SubscriptionData)."""

    topic: str
    expression: str = SUB_ALL
    tags: frozenset[str] = field(default_factory=frozenset)
    codes: frozenset[int] = field(default_factory=frozenset)
    version: int = 0

    @classmethod
    def parse(cls, topic: str, expression: str | None, version: int = 0) -> Subscription:
        tags = parse_tags(expression)
        if tags is None:
            return cls(topic, SUB_ALL, frozenset(), frozenset(), version)
        return cls(topic, expression or SUB_ALL, tags, frozenset(tag_hash(t) for t in tags), version)

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def matches(self, tag: str | None) -> bool:
        """The client-side re-check after the broker's hash filter."""
        return not self.tags or (tag is not None and tag in self.tags)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "subString": self.expression,
            "tagsSet": sorted(self.tags),
            "codeSet": sorted(self.codes),
            "subVersion": self.version,
            "expressionType": "TAG",
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Subscription:
        return cls.parse(str(d["topic"]), d.get("subString"), int(d.get("subVersion", 0)))


class SubscriptionCache:
    """Parsed subscriptions by (topic, expression), so a broker parses an expression once, not per request.

    Emptied once it holds more than ``limit`` (a client sending ever new expressions cannot grow it).
    """

    __slots__ = ("_subs", "limit")

    def __init__(self, limit: int = 10_000) -> None:
        self._subs: dict[tuple[str, str], Subscription] = {}
        self.limit = limit

    def __len__(self) -> int:
        return len(self._subs)

    def get(self, topic: str, expression: str | None) -> Subscription:
        key = (topic, expression or SUB_ALL)
        sub = self._subs.get(key)
        if sub is None:
            if len(self._subs) > self.limit:
                self._subs.clear()
            sub = self._subs[key] = Subscription.parse(topic, expression)
        return sub


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """The set of tags in an expression, or ``None`` when it matches everything."""
    if expression is None:
        return None
    expr = expression.strip()
    if not expr or expr == SUB_ALL:
        return None
    tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
    if not tags or SUB_ALL in tags:
        return None
    return tags


def parse_tags_strict(expression: str) -> frozenset[str] | None:
    """:func:`parse_tags`, rejecting what is almost surely a mistake (for user input such as a CLI).

    Raises ValueError for an empty alternative (``a ||``), or a tag with blanks, ``,`` or ``|``
    in it (``created paid``, ``a,b``, ``a | b``): the broker would take those as one tag
    that matches nothing.
    """
    expr = expression.strip()
    if not expr or expr == SUB_ALL:
        return None
    hint = "tags are separated by '||', e.g. 'created || paid'; '*' matches every tag"
    parts = [t.strip() for t in expr.split("||")]
    for tag in parts:
        if not tag:
            raise ValueError(f"{expression!r} is not a tag expression: an alternative is empty ({hint})")
        if tag != SUB_ALL and any(c.isspace() or c in ",|*" for c in tag):
            raise ValueError(f"{expression!r} is not a tag expression: {tag!r} is not a tag ({hint})")
    return parse_tags(expr)
