"""A network partition of the master (issue 32), made as Jepsen and toxiproxy make them but on
127.0.0.1: a :class:`~pymq.testing.LinkProxy` on every link between nodes (the master's link to
the nameserver and its embedded controller; the slave's HA link to the master), real processes.

Producers send SYNC through the nameserver's routes (clients stay on the majority side: they
reach both brokers directly). Black-holing the master's links (bytes stop, connections stay
open): the master acknowledges nothing once its lease has lapsed, the controller elects the
slave, producers carry on to it. Healing: the old master learns it is a slave, truncates its
unreplicated tail and rejoins the new master's sync-state set; every message acknowledged by
either master (and every one the new master stored alone) is readable afterwards. While cut
off, the old master's HA connection stays open, yet the slave leaves its sync-state set once
it has not caught up for ``ha_max_time_slave_not_catchup_seconds`` (2 s here).

The proxies run on the test's event loop, so the blocking daemon starts go to a thread."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pymq.client import Message, Producer
from pymq.client.send_result import SendStatus
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.frame import Command
from pymq.protocol.headers import decode_body
from pymq.testing import DaemonProcess, LinkProxy, broker_process, namesrv_process
from pymq.transport.client import RpcClient
from tests.controller_group import (
    BROKER_ENV,
    CONTROLLER,
    TOPIC,
    controller_status,
    create_topic,
    in_sync,
    master_is,
    raw_send,
    read_everything,
)
from tests.helpers import wait_until_async
from tests.master_slave import fast_client_options, group_addrs

pytestmark = pytest.mark.integration

LEASE = 0.8  # CONTROLLER's --controller-lease
ENV = {**BROKER_ENV, "PYMQ_HA_MAX_TIME_SLAVE_NOT_CATCHUP_SECONDS": "2", "PYMQ_HA_HEARTBEAT_SECONDS": "0.5"}
PRODUCERS = 4


@dataclass
class Sends:
    """Every answer the producers got: (body, status, broker, when it was answered)."""

    answers: list[tuple[bytes, SendStatus, str, float]] = field(default_factory=list)
    failures: int = 0
    stop: bool = False

    def ok(self, addr: str | None = None, after: float = 0.0) -> list[bytes]:
        return [b for b, s, a, t in self.answers if s is SendStatus.SEND_OK and addr in (None, a) and t >= after]

    def stored_by(self, addr: str) -> list[bytes]:
        return [b for b, _, a, _ in self.answers if a == addr]


async def produce(producer: Producer, sends: Sends, n: int) -> None:
    i = 0
    while not sends.stop:
        body = f"p{n}-{i}".encode()
        i += 1
        try:
            r = await producer.send(Message(TOPIC, body), timeout=2.0)
        except PymqError:
            sends.failures += 1
            await asyncio.sleep(0.05)
            continue
        sends.answers.append((body, r.status, r.store_addr, time.monotonic()))


async def until(check: object, timeout: float, what: str) -> None:
    await wait_until_async(check, timeout=timeout, interval=0.1, what=what)  # type: ignore[arg-type]


async def test_a_partitioned_master_stops_acknowledging_the_slave_is_elected_and_the_old_master_rejoins(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    started = time.monotonic()
    (ha_port,) = free_ports(1)
    ns = namesrv_process(tmp_path, *CONTROLLER, "--controller-dir", str(tmp_path / "ctl"))
    processes.append(await asyncio.to_thread(ns.start))
    to_ns = await LinkProxy(ns.address).start()  # master -> nameserver and controller
    to_master_ha = await LinkProxy(f"127.0.0.1:{ha_port}").start()  # slave -> master's HA listener
    try:
        master = broker_process(tmp_path / "m", to_ns.address, "broker-a", "--role", "SYNC_MASTER",
                                "--controller-mode", env={**ENV, "PYMQ_HA_PORT": str(ha_port)})  # fmt: skip
        processes.append(await asyncio.to_thread(master.start))
        await create_topic(master.address)
        # the slave's HA link through its proxy: the configured HA address goes with the configured master
        slave_env = {**ENV, "PYMQ_MASTER_ADDR": master.address, "PYMQ_HA_MASTER_ADDR": to_master_ha.address}
        slave = broker_process(tmp_path / "s", ns.address, "broker-a", "--role", "SLAVE", "--broker-id", "1",
                               "--controller-mode", env=slave_env)  # fmt: skip
        processes.append(await asyncio.to_thread(slave.start))
        await until(lambda: in_sync(ns.address, slave.address), 15, "slave in the sync-state set")
        await until(lambda: _routed(ns.address, {0: master.address, 1: slave.address}), 15, "group routed")
        info = await runtime_info(slave.address)
        assert info["masterHaAddress"] == to_master_ha.address and info["masterConnected"]  # through the proxy
        assert to_ns.accepted
        epoch = (await controller_status(ns.address))["groups"]["broker-a"]["epoch"]

        sends = Sends()
        async with Producer(ns.address, "pp", **fast_client_options(interval=1.0, persist=1.0)) as producer:
            tasks = [asyncio.create_task(produce(producer, sends, n)) for n in range(PRODUCERS)]
            try:
                await until(_async(lambda: len(sends.ok(master.address)) >= 100), 20, "100 acked by the master")

                # --- the partition: the master is cut off from the controller, nameserver and slave
                to_ns.black_hole()
                to_master_ha.black_hole()
                cut = time.monotonic()
                async with RpcClient() as rpc:
                    # stored by the master after the cut, never on the slave: its tail, to be truncated
                    tail = await rpc.invoke(master.address, raw_send(b"cut-tail"), timeout=5.0)
                assert tail.code in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SERVICE_NOT_AVAILABLE)
                await until(lambda: master_is(ns.address, slave.address), 10, "the slave elected")
                elected = time.monotonic()
                async with RpcClient() as rpc:
                    refused = await rpc.invoke(master.address, raw_send(b"to-old"), timeout=5.0)
                assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, (refused.code, refused.remark)
                assert "lease" in (refused.remark or "")
                late = [b for b, s, a, t in sends.answers if a == master.address and s is SendStatus.SEND_OK
                        and t > cut + LEASE]  # fmt: skip
                assert not late, f"the cut-off master acknowledged {len(late)} sends after its lease"
                await until(_async(lambda: len(sends.stored_by(slave.address)) >= 30), 15, "sends on the new master")
                # the cut-off master still holds its HA connection to the slave open (the black hole
                # closes nothing), but the slave has not caught up for the 2 s window: out of its set
                await until(lambda: _left_sync_set_while_connected(master.address), 10, "set shrunk by time")
                assert await group_addrs(ns.address, TOPIC, "broker-a") == {0: slave.address}

                # --- heal: the old master hears it is a slave, truncates its tail and catches up
                to_ns.heal()
                to_master_ha.heal()
                healed = time.monotonic()
                await until(lambda: in_sync(ns.address, master.address), 20, "the old master in sync as a slave")
                rejoined = time.monotonic()
                await until(_async(lambda: len(sends.ok(slave.address, after=rejoined)) >= 30), 15, "acks after")
            finally:
                sends.stop = True
                await asyncio.gather(*tasks)

        group = (await controller_status(ns.address))["groups"]["broker-a"]
        assert group["master"] == slave.address and group["epoch"] > epoch
        assert group["replicas"][master.address]["brokerId"] > 0
        assert "slave_truncated_to_master" in master.output()
        # the nameserver routes the new master and the old one as its slave (registered through its proxy)
        await until(lambda: _routed(ns.address, {0: slave.address, 1: master.address}), 15, "group routed again")
        acked = set(sends.ok())
        on_new = set(sends.stored_by(slave.address))  # SLAVE_NOT_AVAILABLE while alone: stored there, not acked
        got = await read_everything(ns.address, acked | on_new, timeout=20)
        assert acked <= got, f"lost {len(acked - got)} of {len(acked)} acknowledged messages"
        assert on_new <= got
        assert b"cut-tail" not in got and b"to-old" not in got
    finally:
        await to_ns.close()
        await to_master_ha.close()
    print(
        f"acked {len(acked)} ({len(sends.ok(master.address))} by the old master), failed sends {sends.failures}; "
        f"elected {elected - cut:.2f}s after the cut, rejoined {rejoined - healed:.2f}s after healing; "
        f"wall {time.monotonic() - started:.1f}s"
    )


def _async(check: object) -> object:
    async def run() -> bool:
        return bool(check())  # type: ignore[operator]

    return run


async def _left_sync_set_while_connected(addr: str) -> bool:
    info = await runtime_info(addr)
    return len(info.get("slaves", [])) == 1 and info["inSyncSlaves"] == 0


async def runtime_info(addr: str) -> dict[str, Any]:
    async with RpcClient() as rpc:
        resp = await rpc.invoke_ok(addr, Command.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=3.0)
    info: dict[str, Any] = decode_body(resp.body)
    return info


async def _routed(ns: str, addrs: dict[int, str]) -> bool:
    return await group_addrs(ns, TOPIC, "broker-a") == addrs
