"""Consumer options and listener results (RocketMQ's names)."""

from __future__ import annotations

from enum import StrEnum


class MessageModel(StrEnum):
    #: each message goes to one member of the group; offsets on the broker
    CLUSTERING = "CLUSTERING"
    #: each message goes to every member; offsets in a local file
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(StrEnum):
    """Where a group with no committed offset starts (committed offsets always win)."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeResult(StrEnum):
    """What a concurrent listener returns (``None`` counts as SUCCESS; raising as RECONSUME_LATER)."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyResult(StrEnum):
    """What an orderly listener returns (``None`` counts as SUCCESS)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class PullStatus(StrEnum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"
