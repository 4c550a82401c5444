"""Sends through the RocketMQ 5.x gRPC front end vs pymq's native SDK sends, same run (issue 31).

    python benchmarks/grpc_proxy_bench.py [--messages 2000] [--json]

One in-process broker (LocalCluster, a temporary store) and the front end (GrpcProxy) on a free
port in this process; each client runs in its own process (this script again, ``--client``), as
a real application would. Measured, 128-byte bodies with a tag:

* ``native_1`` / ``grpc_1``: one sender, each send awaited before the next;
* ``native_8`` / ``grpc_8``: 8 concurrent senders.

``grpc_*`` sends SendMessageRequest (one message each) with pymq's generated stub, as a 5.x
client would (grpc's blocking client, a thread per sender; grpc.aio's with ``--in-process``);
``native_*`` uses pymq's Producer. Figures are messages per second; the ratios are grpc / native.
Broker and front end share one process (one core at most); with ``--in-process`` the clients
run there too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

from pymq.client import Message, Producer
from pymq.grpc_proxy import GrpcProxy
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.pb.service_pb2_grpc import MessagingServiceStub
from pymq.testing import LocalCluster

BODY = b"x" * 128


async def native(ns: str, n: int, senders: int) -> float:
    async with Producer(ns) as p:
        await p.send(Message("bench", BODY, tags="T"))  # route warm-up

        async def run(k: int) -> None:
            for _ in range(k):
                await p.send(Message("bench", BODY, tags="T"))

        t0 = time.perf_counter()
        await asyncio.gather(*(run(n // senders) for _ in range(senders)))
        return (n // senders * senders) / (time.perf_counter() - t0)


def _send_request() -> spb.SendMessageRequest:
    message = pb.Message(
        topic=pb.Resource(name="bench"),
        body=BODY,
        system_properties=pb.SystemProperties(tag="T", message_type=pb.NORMAL),
    )
    return spb.SendMessageRequest(messages=[message])


def via_grpc_sync(target: str, n: int, senders: int) -> float:
    """grpc's blocking client, one thread per sender (in a child: cheaper per call than grpc.aio's client)."""
    channel = grpc.insecure_channel(target)
    stub = MessagingServiceStub(channel)
    req = _send_request()
    assert stub.SendMessage(req).status.code == pb.OK

    failures: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for _ in range(k):
                status = stub.SendMessage(req).status
                assert status.code == pb.OK, status  # a rate of refusals is no rate
        except BaseException as exc:  # (a thread's exception would reach only the excepthook)
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(n // senders,)) for _ in range(senders)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = (n // senders * senders) / (time.perf_counter() - t0)
    if failures:
        raise failures[0]
    channel.close()
    return rate


async def via_grpc(target: str, n: int, senders: int) -> float:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = MessagingServiceStub(channel)
        req = spb.SendMessageRequest(
            messages=[
                pb.Message(
                    topic=pb.Resource(name="bench"),
                    body=BODY,
                    system_properties=pb.SystemProperties(tag="T", message_type=pb.NORMAL),
                )
            ]
        )
        first = await stub.SendMessage(req)
        assert first.status.code == pb.OK, first

        async def run(k: int) -> None:
            for _ in range(k):
                status = (await stub.SendMessage(req)).status
                assert status.code == pb.OK, status  # a rate of refusals is no rate

        t0 = time.perf_counter()
        await asyncio.gather(*(run(n // senders) for _ in range(senders)))
        return (n // senders * senders) / (time.perf_counter() - t0)


async def in_child(kind: str, target: str, n: int, senders: int) -> float:
    """Run one client in a child process (this script with ``--client``); its rate."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", kind, "--target", target, "--messages", str(n),
        "--senders", str(senders), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode == 0, f"{kind} client failed"
    return float(out.decode().strip().splitlines()[-1])


async def main(n: int, in_process: bool) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="pymq-grpc-bench-"))
    try:
        async with LocalCluster(tmp / "c", brokers=1) as cluster:
            await cluster.create_topic("bench", 4)
            async with GrpcProxy(cluster.namesrv_addr, port=0) as proxy:
                ns, gp = cluster.namesrv_addr, f"127.0.0.1:{proxy.port}"
                out = {}
                for senders in (1, 8):
                    if in_process:
                        out[f"native_{senders}"] = await native(ns, n, senders)
                        out[f"grpc_{senders}"] = await via_grpc(gp, n, senders)
                    else:
                        out[f"native_{senders}"] = await in_child("native", ns, n, senders)
                        out[f"grpc_{senders}"] = await in_child("grpc", gp, n, senders)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["ratio_1"] = out["grpc_1"] / out["native_1"]
    out["ratio_8"] = out["grpc_8"] / out["native_8"]
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--in-process", action="store_true", help="clients in this process too")
    ap.add_argument("--client", choices=["native", "grpc"], help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    ap.add_argument("--senders", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client:  # a child: one client, print its rate
        if a.client == "native":
            print(asyncio.run(native(a.target, a.messages, a.senders)))
        else:
            print(via_grpc_sync(a.target, a.messages, a.senders))
        sys.exit(0)
    figures = asyncio.run(main(a.messages, a.in_process))
    if a.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:10} {v:10.2f}" if k.startswith("ratio") else f"{k:10} {v:10.0f} msg/s")
