"""Bounded fuzz run against live daemons (the long form is benchmarks/fuzz_daemon.py).

Malformed frames, random headers, bad bodies and valid-but-hostile requests go to a real
nameserver and broker for ~6 s (plain, then with ACL on) while a well-behaved producer sends: the
report must be clean (benchmarks/fuzz_report.py: every worker fuzzed to the end, no worker
raised, both daemons stayed up, no handler failed, the producer saw no error and every message
it had acknowledged reads back).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from benchmarks.fuzz_daemon import GOOD_TOPIC, daemon_env, good_client, run_fuzz
from pymq.client.admin import AdminClient
from pymq.errors import PymqError
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fuzz]


@pytest.mark.parametrize("acl", [False, True], ids=["plain", "acl"])
async def test_daemons_survive_a_bounded_fuzz_run_and_lose_nothing(
    tmp_path: Path, processes: list[DaemonProcess], acl: bool
) -> None:
    """acl: the daemons enforce ACL; half the fuzzer's well-framed inputs are signed, the rest forged."""
    logging.getLogger("asyncio").setLevel(logging.ERROR)  # writes to connections the daemons closed
    ns_env, broker_env = daemon_env(tmp_path, acl)
    ns = namesrv_process(tmp_path, env=ns_env).start()
    processes.append(ns)
    broker = broker_process(tmp_path, ns.address, "broker-a", env=broker_env).start()
    processes.append(broker)
    async with AdminClient(ns.address, **good_client(acl)) as admin:
        await admin.create_topic(GOOD_TOPIC, queues=4)
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # the broker registers the new topic asynchronously
            try:
                await admin.topic_route(GOOD_TOPIC)
                break
            except PymqError:
                assert asyncio.get_running_loop().time() < deadline, "the good topic was never routed"
                await asyncio.sleep(0.1)
    report = await run_fuzz(
        ns.address, broker.address, duration=6.0, inputs=None, workers=4, seed=20, processes=[ns, broker], acl=acl,
        stall_seconds=5.0,
    )  # fmt: skip
    # clean: every worker wrote inputs to the end (none raised or went quiet), no handler failed,
    # the daemons stayed up and answered, and every good send was acknowledged and read back
    assert report.clean, f"{report.text()}\n{ns.output()[-2000:]}\n{broker.output()[-2000:]}"
    assert len(report.per_worker) == 4 and min(report.per_worker) > 100, report.text()
    kinds = ("garbage", "bad_body", "hostile")
    assert report.inputs > 1000 and all(report.by_kind[k] > 0 for k in kinds), report.text()
    await wait_until(lambda: ns.running() and broker.running(), what="daemons still up after the run")
