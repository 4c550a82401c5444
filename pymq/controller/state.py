"""What the controller keeps per broker group (RocketMQ 5's controller, RIP-44 shape). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Replica:
    """One broker of a group as its last heartbeat described it."""

    address: str
    #: the epoch the broker last began or joined
    epoch: int = 0
    #: its commitlog's max offset
    max_offset: int = 0
    #: configured election priority: higher wins among equals
    priority: int = 0
    #: the broker id the controller gave it (0: master)
    broker_id: int = -1


@dataclass(slots=True)
class GroupState:
    """One broker group: its master, the term, the in-sync set and every replica seen."""

    name: str
    master: str | None = None
    epoch: int = 0
    #: replicas known to hold every write the master acknowledged (the master included)
    sync_set: set[str] = field(default_factory=set)
    replicas: dict[str, Replica] = field(default_factory=dict)

    def slave_id(self, address: str) -> int:
        """A stable non-zero broker id for a slave (kept while it stays in the group)."""
        rep = self.replicas.get(address)
        if rep is not None and rep.broker_id > 0:
            return rep.broker_id
        taken = {r.broker_id for r in self.replicas.values()}
        new = next(i for i in range(1, len(taken) + 2) if i not in taken)
        if rep is not None:
            rep.broker_id = new
        return new

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "master": self.master,
            "epoch": self.epoch,
            "syncSet": sorted(self.sync_set),
            "replicas": {
                a: {"epoch": r.epoch, "maxOffset": r.max_offset, "priority": r.priority, "brokerId": r.broker_id}
                for a, r in sorted(self.replicas.items())
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroupState:
        replicas = {
            a: Replica(a, int(r["epoch"]), int(r["maxOffset"]), int(r["priority"]), int(r["brokerId"]))
            for a, r in d.get("replicas", {}).items()
        }
        return cls(str(d["name"]), d.get("master"), int(d["epoch"]), set(d.get("syncSet", [])), replicas)


__all__ = ["GroupState", "Replica"]
