"""The controller's state in etcd (v3 API, through etcd's JSON gateway; stdlib HTTP, no client library).

Every save is one etcd transaction compared on the revision this store last read or wrote
(``MOD(key) == revision``): a controller whose view is stale cannot overwrite another's
decision; it gets :class:`StateConflict` instead. Why the JSON gateway: etcd 3.4 (Debian's
``etcd-server``) serves it on the client port, it needs nothing beyond the standard library,
and the controller's few small reads and writes do not need gRPC's streaming; the Python gRPC
clients for etcd (``etcd3``, ``aetcd``) are unmaintained or pull in grpcio.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

from pymq.controller.state import GroupState


class StateConflict(RuntimeError):
    """Another controller changed the state since this one read it."""


class EtcdUnavailable(RuntimeError):
    """No etcd endpoint answered."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class EtcdStateStore:
    """Every group's state as one JSON value under ``key``, compare-and-swapped on its revision."""

    def __init__(self, endpoints: list[str], key: str = "/pymq/controller/state", timeout: float = 2.0) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.key = key.encode()
        self.timeout = timeout
        #: the key's mod revision when this store last read or wrote it (0: absent)
        self.revision = 0

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        last: Exception | None = None
        for ep in self.endpoints:
            req = urllib.request.Request(f"{ep}{path}", data, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    answer: dict[str, Any] = json.loads(resp.read() or b"{}")
                    return answer
            except (urllib.error.URLError, OSError) as exc:
                last = exc
        raise EtcdUnavailable(f"no etcd endpoint of {self.endpoints} answered: {last}")

    def load(self) -> dict[str, GroupState]:
        answer = self._post("/v3/kv/range", {"key": _b64(self.key)})
        kvs = answer.get("kvs") or []
        if not kvs:
            self.revision = 0
            return {}
        self.revision = int(kvs[0].get("mod_revision", 0))
        data = json.loads(base64.b64decode(kvs[0].get("value", "")))
        return {name: GroupState.from_dict(d) for name, d in data.get("groups", {}).items()}

    def save(self, groups: dict[str, GroupState]) -> None:
        value = json.dumps({"groups": {n: g.to_dict() for n, g in sorted(groups.items())}}).encode()
        key = _b64(self.key)
        txn = {
            "compare": [{"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(self.revision)}],
            "success": [{"request_put": {"key": key, "value": _b64(value)}}],
        }
        answer = self._post("/v3/kv/txn", txn)
        if not answer.get("succeeded"):
            raise StateConflict(f"the controller state in etcd changed since revision {self.revision}")
        self.revision = int(answer.get("header", {}).get("revision", self.revision))


__all__ = ["EtcdStateStore", "EtcdUnavailable", "StateConflict"]
