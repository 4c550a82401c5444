"""What the remoting translators may know of the broker (nothing else: they map, the native handlers act)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _no_subscription(group: str, topic: str) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class RemotingContext:
    #: ``host:port`` of this broker's listener (the store host of offsetMsgId)
    address: str
    broker_name: str
    cluster_name: str
    #: (group, topic) -> the tag expression the group's heartbeat registered (None: not registered);
    #: what a PULL_MESSAGE without the subscription bit filters by
    subscription: Callable[[str, str], str | None] = _no_subscription
