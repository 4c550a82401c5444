"""GET_CONSUMER_RUNNING_INFO (307) relayed to a RocketMQ 4.x client: the C++ push consumer answers it.

The broker sends the C++ client the request over the client's own remoting connection
(:meth:`RemotingChannel.request`: same code and header names) and passes its JSON answer back as
the body; AdminClient reads it (its ``mqTable`` is keyed by MessageQueue objects: not JSON) into pymq's shape.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from pymq.client.admin import AdminClient
from pymq.testing import broker_process, namesrv_process
from tests.daemon_helpers import create_topic, wait_for_route
from tests.helpers import wait_until_async

from .conftest import SCRIPTS

pytestmark = pytest.mark.integration


async def test_a_cpp_consumer_answers_running_info(cpp_python: Path, tmp_path: Path, processes) -> None:
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    broker = broker_process(tmp_path, ns.address, "broker-a", env={"PYMQ_HA_PORT": "0"})
    processes.append(broker)
    await asyncio.to_thread(broker.start)
    await create_topic([broker], "t-run", 4)
    await wait_for_route(ns.address, "t-run", 1)
    home = tmp_path / "home"
    home.mkdir()
    stop = tmp_path / "stop"
    with open(tmp_path / "cpp.log", "wb") as log:
        args = [ns.address, "g-cpp-run", "t-run", "*", "cpp-run", "clustering", "0", str(stop), str(tmp_path / "o")]
        proc = subprocess.Popen(
            [str(cpp_python), str(SCRIPTS / "consume_push.py"), *args],
            env={**os.environ, "HOME": str(home)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            async with AdminClient(ns.address) as admin:
                client_ids: list[str] = []

                async def connected() -> bool:
                    try:
                        conns = (await admin.consumer_connection("g-cpp-run"))["connections"]
                    except Exception:
                        return False
                    client_ids[:] = [c["clientId"] for c in conns if c["protocol"] == "remoting"]
                    return bool(client_ids)

                await wait_until_async(connected, timeout=60, interval=0.3, what="the C++ consumer heartbeating")
                info = await admin.consumer_running_info("g-cpp-run", client_ids[0], jstack=True)
                assert info["format"] == "remoting" and info["brokerName"] == "broker-a"
                # its JSON (MessageQueue objects as map keys) read into pymq's shape
                assert "raw" not in info, info
                assert {s["topic"] for s in info["subscriptionSet"]} == {"t-run", "%RETRY%g-cpp-run"}
                queues = sorted(r["mq"]["queueId"] for r in info["mqTable"] if r["mq"]["topic"] == "t-run")
                assert queues == [0, 1, 2, 3]
                assert all(r["pq"]["lastPullTimestamp"] > 0 for r in info["mqTable"])
                assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        finally:
            stop.touch()
            try:
                await asyncio.to_thread(proc.wait, 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
