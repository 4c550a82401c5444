"""Operators' requests from the dashboard (issue 33): CONSUME_MESSAGE_DIRECTLY's header and result,
and what its client answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymq.protocol.wire_header import Header, wire_header

#: ConsumeMessageDirectlyResult's consumeResult values (RocketMQ's CMResult)
CR_SUCCESS = "CR_SUCCESS"
CR_LATER = "CR_LATER"
CR_RETURN_NULL = "CR_RETURN_NULL"
CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"


@wire_header
@dataclass(slots=True, kw_only=True)
class ConsumeMessageDirectlyRequest(Header):
    """CONSUME_MESSAGE_DIRECTLY (RocketMQ's ConsumeMessageDirectlyResultRequestHeader): admin -> the broker
    that stores the message (``msg_id`` is its offset id), then broker -> the client with the stored message
    as the body. ``client_id`` empty: any connected client of the group (pymq's; RocketMQ needs one)."""

    consumer_group: str
    client_id: str = ""
    msg_id: str
    #: set by the broker for the client (the message's broker group)
    broker_name: str | None = None
    topic: str | None = None


def directly_result(
    consume_result: str, *, order: bool, spent_ms: int, remark: str | None = None, client_id: str = ""
) -> dict[str, Any]:
    """A ConsumeMessageDirectlyResult (RocketMQ's field names), the client's answer body."""
    return {
        "order": order,
        "autoCommit": True,
        "consumeResult": consume_result,
        "remark": remark,
        "spentTimeMills": spent_ms,
        "clientId": client_id,
    }
