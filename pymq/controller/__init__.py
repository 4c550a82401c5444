"""The failover controller (issue 32): per broker group, who is master, at which epoch, and which
replicas hold every acknowledged write; a new master is elected from those when the master's
heartbeat lapses.

* :mod:`.state` — the per-group record (pure);
* :mod:`.election` — who wins an election (pure);
* :mod:`.leases` — heartbeat bookkeeping on an injected clock (pure);
* :mod:`.core` — the controller's decisions: heartbeats in, roles and elections out (pure);
* :mod:`.store` — where the state lives (a small interface; a file for one machine);
* :mod:`.etcd_store` — the state in etcd, compare-on-revision (v3 JSON gateway, stdlib HTTP);
* :mod:`.leadership` — which of several controllers is active, when it steps down (pure);
* :mod:`.etcd_campaign` — the campaign for the active controller through an etcd lease;
* :mod:`.service` — the RPC face, embedded in ``pymq-namesrv --controller embedded|etcd``.
"""
