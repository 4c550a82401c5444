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


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class EtcdGateway:
    """POSTs to etcd's v3 JSON gateway, trying each endpoint in turn (blocking: call it from a
    thread). An endpoint that fails goes to the end of the list, so a dead etcd member costs one
    failed connection, not one per request."""

    def __init__(self, endpoints: list[str], timeout: float = 2.0) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.timeout = timeout

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        last: Exception | None = None
        for ep in list(self.endpoints):
            req = urllib.request.Request(f"{ep}{path}", data, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    answer: dict[str, Any] = json.loads(resp.read() or b"{}")
                    return answer
            except (urllib.error.URLError, OSError) as exc:
                last = exc
                if len(self.endpoints) > 1 and self.endpoints[0] == ep:
                    self.endpoints.append(self.endpoints.pop(0))
        raise EtcdUnavailable(f"no etcd endpoint of {sorted(self.endpoints)} answered: {last}")


class EtcdStateStore:
    """Every group's state as one JSON value under ``key``, compare-and-swapped on its revision.

    With ``fence`` set (by an active controller of several: ``(leadership key, lease id)``),
    a save also requires the leadership key to still be bound to that lease: a controller that
    lost its leadership gets :class:`StateConflict` even before its successor wrote anything.
    """

    def __init__(
        self,
        endpoints: list[str],
        key: str = "/pymq/controller/state",
        timeout: float = 2.0,
        *,
        gateway: EtcdGateway | None = None,
    ) -> None:
        self.gateway = gateway or EtcdGateway(endpoints, timeout)
        self.key = key.encode()
        #: the key's mod revision when this store last read or wrote it (0: absent)
        self.revision = 0
        #: (leadership key, lease id) every save also compares on; None: no campaign
        self.fence: tuple[bytes, int] | None = None

    @property
    def endpoints(self) -> list[str]:
        return self.gateway.endpoints

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.gateway.post(path, body)

    def load(self) -> dict[str, GroupState]:
        answer = self._post("/v3/kv/range", {"key": b64(self.key)})
        kvs = answer.get("kvs") or []
        if not kvs:
            self.revision = 0
            return {}
        self.revision = int(kvs[0].get("mod_revision", 0))
        data = json.loads(base64.b64decode(kvs[0].get("value", "")))
        return {name: GroupState.from_dict(d) for name, d in data.get("groups", {}).items()}

    def save(self, groups: dict[str, GroupState]) -> None:
        value = json.dumps({"groups": {n: g.to_dict() for n, g in sorted(groups.items())}}).encode()
        key = b64(self.key)
        compare: list[dict[str, str]] = [
            {"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(self.revision)}
        ]
        if self.fence is not None:
            leader_key, lease = self.fence
            compare.append({"key": b64(leader_key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)})
        txn = {
            "compare": compare,
            "success": [{"request_put": {"key": key, "value": b64(value)}}],
        }
        answer = self._post("/v3/kv/txn", txn)
        if not answer.get("succeeded"):
            raise StateConflict(
                f"the controller state in etcd changed since revision {self.revision}"
                + (" (or this controller lost its leadership)" if self.fence is not None else "")
            )
        self.revision = int(answer.get("header", {}).get("revision", self.revision))


__all__ = ["EtcdGateway", "EtcdStateStore", "EtcdUnavailable", "StateConflict"]
