"""CONSUME_MESSAGE_DIRECTLY (309, issue 33): an operator asks one consumer client to consume one stored
message with its listener now (the dashboard's "resend to a group", RocketMQ Dashboard's
consumeMessageDirectly).

The broker relays the admin's request with the stored message as the body; the client's
:class:`~pymq.client.instance.ClientInstance` hands it to the named group's push consumer,
which calls its listener (concurrent or orderly) on ``[msg]`` (hooks included) and answers a
ConsumeMessageDirectlyResult: the result (``CR_SUCCESS``, ``CR_LATER``, ``CR_RETURN_NULL``,
``CR_THROW_EXCEPTION``), a remark and the time spent. As in RocketMQ nothing else happens: no
offset is committed, a failure is not sent back, the process queues are not touched.

:func:`classify` is pure; :func:`consume_directly` only runs the listener.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from pymq.client.consumer_types import ConsumeOrderlyResult, ConsumeResult
from pymq.logs import get_logger
from pymq.protocol.message import MessageExt
from pymq.protocol.requests_operator import (
    CR_LATER,
    CR_RETURN_NULL,
    CR_SUCCESS,
    CR_THROW_EXCEPTION,
    directly_result,
)
from pymq.tasks import wait_within

log = get_logger("client.consume_directly")

#: the longest a listener may take on a message consumed directly (the broker waits less: it says so)
DIRECT_CONSUME_TIMEOUT = 60.0

_SUCCESS = {ConsumeResult.SUCCESS, ConsumeResult.SUCCESS.value, ConsumeOrderlyResult.SUCCESS, "SUCCESS"}


def classify(result: Any) -> tuple[str, str | None]:
    """A listener's return value as RocketMQ's CMResult and a remark. ``None`` is RETURN_NULL (pymq's
    listeners count it as success, so the remark says so)."""
    if result is None:
        return CR_RETURN_NULL, "the listener returned None (counted as success)"
    if result in _SUCCESS:
        return CR_SUCCESS, None
    return CR_LATER, f"the listener returned {getattr(result, 'value', result)}"


async def consume_directly(
    listener: Callable[[list[MessageExt]], Any],
    msg: MessageExt,
    *,
    is_async: bool,
    executor: Executor | None,
    orderly: bool,
    client_id: str,
    timeout: float = DIRECT_CONSUME_TIMEOUT,
) -> dict[str, Any]:
    """Run ``listener`` on ``[msg]`` (on the loop, or in ``executor`` for a blocking one) and describe how
    it went (:func:`~pymq.protocol.requests_operator.directly_result`)."""
    started = time.perf_counter()
    try:
        if is_async:
            result = await wait_within(listener([msg]), timeout)
        else:
            fut = asyncio.get_running_loop().run_in_executor(executor, listener, [msg])
            result = await wait_within(fut, timeout)
        code, remark = classify(result)
    except TimeoutError:
        code, remark = CR_THROW_EXCEPTION, f"the listener did not return within {timeout:g}s"
    except Exception as exc:
        log.info("consume_directly_listener_raised", msg_id=msg.msg_id, error=repr(exc))
        code, remark = CR_THROW_EXCEPTION, f"{type(exc).__name__}: {exc}"
    spent = int((time.perf_counter() - started) * 1000)
    return directly_result(code, order=orderly, spent_ms=spent, remark=remark, client_id=client_id)
