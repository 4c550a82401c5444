"""The floor under a transactional send: its protocol's shape with the transaction work taken away.

    python benchmarks/txn_floor_bench.py [--count 4000] [--rounds 3] [--json]

``send_in_transaction`` with an empty local transaction is two requests on one connection: a
sync send of the half message, answered after the broker stored it, then a oneway
END_TRANSACTION, after which the broker stores two records (the committed message and its op
record) while the producer already sends its next half. One embedded broker (as
``pymq-bench producer --embedded``), one producer, 1 KiB bodies, interleaved in the same minutes:

* ``plain``: ``await producer.send(msg)`` (the aim's denominator);
* ``send+oneway``: that send, then a oneway send of the same message (the broker stores it
  while the producer sends again): the two-request shape with one store put behind the oneway;
* ``send+oneway2``: the same with a oneway *batch of two* messages (two store puts behind the
  oneway, as a commit's message and op record): the protocol's shape, no transaction logic;
* ``transaction``: ``send_in_transaction`` (half send, empty local transaction, oneway commit).

Prints each rate (median of the rounds) and its ratio to ``plain``; ``send+oneway2`` / ``plain`` is
the floor a transactional send of this protocol reaches on the machine, whatever the broker's
transaction code costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Awaitable, Callable

import uvloop

from pymq.bench.embedded import EmbeddedCluster
from pymq.client import broker_api
from pymq.client.producer import Producer
from pymq.client.transaction_producer import TransactionProducer, TransactionState
from pymq.logs import configure_logging
from pymq.protocol.message import Message

TOPIC = "FloorTopic"
BODY = bytes(range(256)) * 4


def _commit(_msg: Message, _arg: object) -> TransactionState:
    return TransactionState.COMMIT


async def _rate(step: Callable[[], Awaitable[object]], count: int) -> float:
    for _ in range(200):  # warm-up: routes, connections
        await step()
    t0 = time.perf_counter()
    for _ in range(count):
        await step()
    return count / (time.perf_counter() - t0)


async def _round(namesrv: str, count: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with Producer(namesrv, "floor-plain") as p:
        out["plain"] = await _rate(lambda: p.send(Message(TOPIC, BODY)), count)

        async def send_oneway() -> None:
            await p.send(Message(TOPIC, BODY))
            await p.send_oneway(Message(TOPIC, BODY))

        out["send+oneway"] = await _rate(send_oneway, count)

        inst = p.instance
        assert inst is not None

        async def send_oneway2() -> None:
            res = await p.send(Message(TOPIC, BODY))
            # a oneway batch of two records (1 KiB and a small one) to the queue the send went to
            data, _ids = p._encode_batch([Message(TOPIC, BODY), Message(TOPIC, b"op")], TOPIC)
            cmd = broker_api.send_message(TOPIC, res.message_queue.queueId, p.group, data, batch=True)
            await inst.rpc.invoke_oneway(res.store_addr, cmd)

        out["send+oneway2"] = await _rate(send_oneway2, count)
    async with TransactionProducer(namesrv, "floor-tx", lambda m: TransactionState.COMMIT) as tp:
        out["transaction"] = await _rate(lambda: tp.send_in_transaction(Message(TOPIC, BODY), _commit), count)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=4000, help="requests per variant and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    configure_logging("warning")
    rates: dict[str, list[float]] = {}
    with EmbeddedCluster() as cluster:
        for _ in range(args.rounds):
            for k, v in uvloop.run(_round(cluster.namesrv, args.count)).items():
                rates.setdefault(k, []).append(v)
    med = {k: statistics.median(v) for k, v in rates.items()}
    if args.json:
        print(json.dumps({k: round(v, 1) for k, v in med.items()}))
        return
    for k, v in med.items():
        print(f"{k:14} {v:9.1f} /s  ratio to plain {v / med['plain']:.3f}   (rounds: {[round(x) for x in rates[k]]})")


if __name__ == "__main__":
    main()
