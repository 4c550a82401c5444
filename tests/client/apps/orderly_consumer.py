"""An orderly consumer process for tests: logs each consumed (order, step) to a file until SIGTERM.

usage: orderly_consumer.py NAMESRV GROUP NAME OUT_FILE [FAIL_EVERY]

FAIL_EVERY > 0 makes every FAIL_EVERY-th first delivery suspend once (an injected retry).
Once the consumer has started it writes its pid to OUT_FILE.NAME.ready (one file per consumer).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from pymq.client import ConsumeFromWhere, ConsumeOrderlyResult, PushConsumer
from pymq.logs import configure_logging

FAST = {
    "rebalance_interval_seconds": 1.0,
    "heartbeat_interval_seconds": 1.0,
    "persist_offset_interval_seconds": 0.2,
    "lock_renew_interval": 1.0,
    "lock_valid_seconds": 2.5,
}


async def main() -> None:
    namesrv, group, name, out_path = sys.argv[1:5]
    fail_every = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    configure_logging(os.environ.get("ORDERLY_LOG", "warning"))
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - line-buffered log kept open while consuming
    consumer = PushConsumer(
        namesrv,
        group,
        instance_name=name,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        suspend_current_queue_time=0.05,
        **FAST,
    )
    consumer.subscribe("orders")
    counter = 0

    @consumer.orderly_listener
    async def on(msgs):
        nonlocal counter
        for m in msgs:
            counter += 1
            if fail_every and m.reconsume_times == 0 and counter % fail_every == 0:
                out.write(f"{name} RETRY {m.body.decode()} {m.queue_id} {m.queue_offset}\n")
                return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
            out.write(f"{name} OK {m.body.decode()} {m.queue_id} {m.queue_offset}\n")
        return ConsumeOrderlyResult.SUCCESS

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with consumer:
        with open(f"{out_path}.{name}.ready", "w") as ready:
            ready.write(str(os.getpid()))
        await stop.wait()
    out.close()


if __name__ == "__main__":
    asyncio.run(main())
