"""Transactional messages: the property names and transaction types client and broker share (RocketMQ's).

A producer marks a half message with ``TRAN_MSG=true`` and its group in ``PGROUP``; the
broker stores it in its half topic (with ``REAL_TOPIC``/``REAL_QID``) and counts its
check-backs in ``TRANSACTION_CHECK_TIMES``. ``CHECK_IMMUNITY_TIME_IN_SECONDS`` overrides
the broker's transaction timeout for one message: no check-back before that many seconds.
"""

from __future__ import annotations

from pymq.protocol.record import SYSFLAG_TX_COMMIT, SYSFLAG_TX_PREPARED, SYSFLAG_TX_ROLLBACK

TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: RocketMQ's PROPERTY_TRANSACTION_ID (the producer's unique id of the message)
TRANSACTION_ID = "__transactionId__"

#: END_TRANSACTION ``commitOrRollback`` values (RocketMQ's MessageSysFlag transaction types)
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = SYSFLAG_TX_PREPARED
TRANSACTION_COMMIT_TYPE = SYSFLAG_TX_COMMIT
TRANSACTION_ROLLBACK_TYPE = SYSFLAG_TX_ROLLBACK
#: the sys-flag bits the transaction type occupies
TRANSACTION_TYPE_MASK = SYSFLAG_TX_ROLLBACK


def with_transaction_type(sys_flag: int, tx_type: int) -> int:
    """``sys_flag`` with its transaction bits replaced by ``tx_type`` (RocketMQ's resetTransactionValue)."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | tx_type


__all__ = [
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "PGROUP",
    "TRANSACTION_CHECK_TIMES",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_ID",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "TRAN_MSG",
    "with_transaction_type",
]
