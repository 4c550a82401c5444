"""What the remoting translators may know of the broker (nothing else: they map, the native handlers act)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RemotingContext:
    #: ``host:port`` of this broker's listener (the store host of offsetMsgId)
    address: str
    broker_name: str
    cluster_name: str
