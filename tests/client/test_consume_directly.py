"""CONSUME_MESSAGE_DIRECTLY's client side without a broker: a listener's result as RocketMQ's CMResult."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from pymq.client.consume_directly import classify, consume_directly
from pymq.client.consumer_types import ConsumeOrderlyResult, ConsumeResult
from pymq.protocol.message import MessageExt


def test_classify() -> None:
    assert classify(ConsumeResult.SUCCESS) == ("CR_SUCCESS", None)
    assert classify(ConsumeOrderlyResult.SUCCESS) == ("CR_SUCCESS", None)
    assert classify("CONSUME_SUCCESS") == ("CR_SUCCESS", None)
    assert classify(None)[0] == "CR_RETURN_NULL"
    assert classify(ConsumeResult.RECONSUME_LATER) == ("CR_LATER", "the listener returned RECONSUME_LATER")


async def test_a_slow_listener_is_cut_off_and_a_blocking_one_runs_in_the_executor() -> None:
    msg = MessageExt.__new__(MessageExt)

    async def slow(msgs: list[MessageExt]) -> None:
        await asyncio.sleep(5)

    result = await consume_directly(slow, msg, is_async=True, executor=None, orderly=False, client_id="c", timeout=0.05)
    assert result["consumeResult"] == "CR_THROW_EXCEPTION" and "within 0.05s" in result["remark"]
    with ThreadPoolExecutor(1) as pool:
        result = await consume_directly(
            lambda msgs: ConsumeResult.SUCCESS, msg, is_async=False, executor=pool, orderly=True, client_id="c"
        )
    assert result == {
        "order": True,
        "autoCommit": True,
        "consumeResult": "CR_SUCCESS",
        "remark": None,
        "spentTimeMills": result["spentTimeMills"],
        "clientId": "c",
    }
