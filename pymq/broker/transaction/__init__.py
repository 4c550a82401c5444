"""Transactional messages (RocketMQ's two-phase send): half messages, commit/rollback, check-back.

* :mod:`.hook` — the put hook that parks half messages in the half topic;
* :mod:`.service` — :class:`TransactionalMessageService`: END_TRANSACTION's commit or rollback,
  the op log, pending half messages;
* :mod:`.check` — the master-only check-back service (asks a producer of the group);
* :mod:`.handlers` — END_TRANSACTION and GET_PENDING_HALF_MESSAGES;
* :mod:`.acl` — the ACL's resolver for END_TRANSACTION without a topic (4.x clients).
"""

__all__: list[str] = []
