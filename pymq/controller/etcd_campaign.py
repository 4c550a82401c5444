"""The campaign for the active controller in etcd (v3 JSON gateway, stdlib HTTP). Blocking: the
service calls these from a thread (``asyncio.to_thread``).

Each controller holds one etcd lease (``/v3/lease/grant``, kept alive by ``/v3/lease/keepalive``)
and campaigns with one transaction: *if the leadership key does not exist* (``CREATE == 0``)
put it, bound to the lease, with this controller's address as its value; else read it (who is
active). The key goes when the active controller's lease expires (it died, or could not reach
etcd for the lease's TTL) or is revoked (it stepped down), and the next campaign wins. etcd's
own ``/v3/election/campaign`` works through the 3.4 gateway too, but it blocks until elected:
a thread stuck in it could not be cancelled, and a standby could not say who is active.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from pymq.controller.etcd_store import EtcdGateway, b64


@dataclass(frozen=True, slots=True)
class CampaignResult:
    won: bool
    #: the active controller's address (this one's when won)
    leader: str | None


class EtcdCampaign:
    """One controller's lease and campaign on ``key``."""

    def __init__(self, gateway: EtcdGateway, key: str, me: str, ttl: int) -> None:
        self.gateway = gateway
        self.key = key.encode()
        self.me = me
        self.ttl = ttl
        #: this controller's current etcd lease (0: none)
        self.lease = 0

    def grant(self) -> float:
        """A new lease; returns its TTL in seconds (etcd raises a TTL below its minimum)."""
        answer = self.gateway.post("/v3/lease/grant", {"TTL": self.ttl})
        self.lease = int(answer["ID"])
        return float(answer.get("TTL", self.ttl))

    def keepalive(self) -> float:
        """Renews the lease; returns the seconds left (0: the lease is gone, a new one is needed)."""
        if not self.lease:
            return 0.0
        answer = self.gateway.post("/v3/lease/keepalive", {"ID": str(self.lease)})
        ttl = float((answer.get("result") or {}).get("TTL", 0))
        if ttl <= 0:
            self.lease = 0
        return ttl

    def campaign(self) -> CampaignResult:
        """One attempt: create the key bound to this lease, or learn who holds it."""
        if not self.lease:
            # a key put without a lease would never expire: the leadership could never move again
            raise RuntimeError("no etcd lease to campaign with")
        key = b64(self.key)
        txn = {
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": b64(self.me.encode()), "lease": str(self.lease)}}],
            "failure": [{"request_range": {"key": key}}],
        }
        answer = self.gateway.post("/v3/kv/txn", txn)
        if answer.get("succeeded"):
            return CampaignResult(True, self.me)
        leader: str | None = None
        holder_lease = 0
        for r in answer.get("responses") or []:
            for kv in (r.get("response_range") or {}).get("kvs") or []:
                leader = base64.b64decode(kv.get("value", "")).decode()
                holder_lease = int(kv.get("lease", 0))
        if holder_lease and holder_lease == self.lease:
            return CampaignResult(True, self.me)  # still bound to this lease (after a keepalive blip)
        return CampaignResult(False, leader)

    def resign(self) -> None:
        """Revokes the lease (the key goes with it, if this controller held it)."""
        lease, self.lease = self.lease, 0
        if lease:
            self.gateway.post("/v3/lease/revoke", {"ID": str(lease)})


__all__ = ["CampaignResult", "EtcdCampaign"]
