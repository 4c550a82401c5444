"""Transactional message request headers (issue 18): END_TRANSACTION, CHECK_TRANSACTION_STATE, pending halves.

The property names and transaction types are in :mod:`pymq.protocol.transaction`.
Re-exported by :mod:`pymq.protocol.requests`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pymq.protocol.wire_header import I32_MAX, Header, bounded, wire_header


@wire_header
@dataclass(slots=True, kw_only=True)
class EndTransactionRequest(Header):
    """END_TRANSACTION (oneway): commit or roll back the half message stored at ``commit_log_offset``.

    ``commit_or_rollback`` is RocketMQ's transaction type (see :mod:`pymq.protocol.transaction`):
    8 commit, 12 rollback, 0 not decided (logged, nothing done).
    """

    producer_group: str
    #: the half message's offset in the half topic's queue
    tran_state_table_offset: int = bounded(lo=0)
    commit_log_offset: int = bounded(lo=0)
    commit_or_rollback: int = bounded(lo=0, hi=I32_MAX)
    from_transaction_check: bool = False
    msg_id: str = ""
    transaction_id: str | None = None
    #: the half message's real topic (RocketMQ 5's field; RocketMQ 4 clients leave it out): with ACL
    #: on the account needs PUB on it (on the half's real topic when left out); the broker ignores an
    #: END_TRANSACTION whose topic is not the half's
    topic: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class CheckTransactionStateRequest(Header):
    """CHECK_TRANSACTION_STATE (oneway, broker -> producer); the body is the stored half message."""

    topic: str | None = None
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


@wire_header
@dataclass(slots=True, kw_only=True)
class PendingHalfMessagesRequest(Header):
    """GET_PENDING_HALF_MESSAGES: the half messages still waiting for an outcome (optionally of one group)."""

    producer_group: str | None = None
    max_num: int = bounded(1000, lo=1, hi=100_000)
