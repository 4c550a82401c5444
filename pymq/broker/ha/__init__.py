"""Master/slave replication: the HA link (codec, master service, slave client) and epoch checks.

* :mod:`.codec` (HA frames, sans-IO), :mod:`.epoch_file`, :mod:`.epochs` (the join check, pure),
  :mod:`.acks` (SYNC_MASTER waiters, pure), :mod:`.auth` (the link's ACL);
* :mod:`.master` (the HA listener), :mod:`.slave` (the follower), :mod:`.meta_sync` (a slave's
  copy of its master's metadata), :mod:`.replication` (the HA side of the broker's role);
* :mod:`.handlers` — GET_ALL_DELAY_OFFSET and NOTIFY_BROKER_ROLE_CHANGED on the normal port.

The role itself (MASTER/SLAVE/FENCED/PROMOTING) is :mod:`pymq.broker.role`'s. See
docs/ARCHITECTURE.md ("Replication") for the design.
"""

__all__: list[str] = []
