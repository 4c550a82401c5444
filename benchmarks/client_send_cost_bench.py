"""What the client's single send costs, in process: ``await producer.send(msg)`` of a 1 KiB message.

    python benchmarks/client_send_cost_bench.py [--calls] [--profile [SORT]] [--sync] [-n N] [--concurrency C]

The real Producer, ClientInstance, RpcClient and Connection (uvloop), with no broker: the
connection's transport is a fake that answers each request frame with a prebuilt SEND_MESSAGE
response frame (its opaque patched in), fed back through ``Connection.data_received`` on the
next loop iteration, as a socket read would be. So a send runs the same code as against a real
broker: encode, queue selection, request frame, pending future + deadline, the response's
decode, SendResult. Reports the median µs per send of several rounds (wall, and the thread's CPU time, which
other processes' load disturbs less); ``--calls`` counts the
Python function calls (cProfile's, C functions included) per send, of which the fake transport
accounts for 3 (``writelines``, ``bytearray``'s copy, ``pack_into``) plus the loop's call of
``data_received``. ``--profile`` prints the top functions by own time. ``--concurrency C`` runs C
producers on the loop, each with its own client instance and connection, as W4's in pymq-bench.
``--sync`` measures the sync facade's ``send`` instead (a thread hop per send: expect more µs, mostly waiting).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import struct
import sys
import time

import msgpack
import uvloop

from pymq.client.producer import Producer
from pymq.client.routes import write_queues
from pymq.client.transaction_producer import TransactionProducer, TransactionState
from pymq.logs import configure_logging
from pymq.protocol.command import FLAG_RESPONSE
from pymq.protocol.message import Message
from pymq.protocol.route import BrokerData, QueueData, TopicRouteData
from pymq.transport.connection import Connection

ADDR = "127.0.0.1:10911"
TOPIC = "bench"
_OPAQUE_MARK = 0x7EADBEEF


def response_template() -> tuple[bytes, int]:
    """A SEND_MESSAGE answer frame and the offset of its 4-byte opaque (packed as msgpack uint32)."""
    ext = {"queueId": 3, "queueOffset": 123456, "commitLogOffsets": [987654321]}
    header = msgpack.packb([0, _OPAQUE_MARK, FLAG_RESPONSE, None, ext], use_bin_type=True)
    frame = struct.pack(">II", 4 + len(header), len(header)) + header
    at = frame.index(b"\xce" + struct.pack(">I", _OPAQUE_MARK)) + 1
    return frame, at


class AnsweringTransport:
    """Answers every request written with the template response, one loop iteration later."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.conn: Connection | None = None
        self.loop = loop
        self.template, self.at = response_template()
        self.closing = False
        #: the last opaque answered (a oneway request written after it must not be answered again)
        self.answered = -1

    def writelines(self, bufs: list[bytes]) -> None:
        conn = self.conn
        assert conn is not None
        if not conn._pending:
            return  # a oneway request (END_TRANSACTION) with nothing awaiting an answer
        opaque = next(reversed(conn._pending))
        if opaque == self.answered:
            return  # a oneway request while a request is still awaited: not answered twice
        self.answered = opaque
        frame = bytearray(self.template)
        struct.pack_into(">I", frame, self.at, opaque)
        self.loop.call_soon(conn.data_received, bytes(frame))

    def write(self, b: bytes) -> None:
        self.writelines([b])

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True
        if self.conn is not None:
            self.loop.call_soon(self.conn.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, k: str, d: object = None) -> object:
        return {"peername": ("127.0.0.1", 10911), "sockname": ("127.0.0.1", 40000)}.get(k, d)

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def install_fake_broker(producer: Producer) -> None:
    """A route to one broker with 8 queues, and a connection to it over :class:`AnsweringTransport`."""
    inst = producer.instance
    assert inst is not None
    route = TopicRouteData([QueueData("broker-a", 8, 8)], [BrokerData("bench", "broker-a", {0: ADDR})])
    inst.routes.put(TOPIC, route)
    inst.routes._write[TOPIC] = write_queues(TOPIC, route)  # as a first send's route fetch leaves it
    rpc = inst.rpc
    conn = Connection(rpc.dispatcher, rpc.codec)
    transport = AnsweringTransport(asyncio.get_running_loop())
    transport.conn = conn
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.signer = rpc.signer
    conn.attrs["addr"] = ADDR
    rpc._conns[ADDR] = conn
    producer._topics.add(TOPIC)  # as the first send's route fetch leaves it


async def rounds(producers: list[Producer], msg: Message, n: int, count: int) -> tuple[list[float], list[float]]:
    """``count`` rounds of ``n`` sends in all, spread over the producers (each awaits its sends in turn)."""

    async def sender(producer: Producer, k: int) -> None:
        if isinstance(producer, TransactionProducer):
            send_tx = producer.send_in_transaction
            for _ in range(k):
                await send_tx(msg, _commit)
            return
        send = producer.send
        for _ in range(k):
            await send(msg)

    async def run(k: int) -> None:
        if len(producers) == 1:
            await sender(producers[0], k)
        else:
            await asyncio.gather(*(sender(p, k // len(producers)) for p in producers))

    await run(2000)
    out = []
    cpu = []
    for _ in range(count):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        await run(n)
        out.append((time.perf_counter() - t0) / n * 1e6)
        cpu.append((time.thread_time() - c0) / n * 1e6)
    return out, cpu


def _commit(*_args: object) -> TransactionState:
    return TransactionState.COMMIT


async def main(n: int, concurrency: int, transaction: bool) -> None:
    body = bytes(range(256)) * 4  # 1 KiB
    msg = Message(TOPIC, body)
    async with contextlib.AsyncExitStack() as stack:
        producers = []
        for i in range(concurrency):  # as pymq-bench: a client instance (its own connection) per producer
            name = f"client-bench-{i}"
            producer = (
                TransactionProducer("127.0.0.1:1", name, _commit, instance_name=name)
                if transaction
                else Producer("127.0.0.1:1", name, instance_name=name)
            )
            await stack.enter_async_context(producer)
            install_fake_broker(producer)
            result = await producer.send(msg)
            assert result.queue_offset == 123456 and result.commit_log_offsets == [987654321], result
            producers.append(producer)
        times, cpu = await rounds(producers, msg, n, 7)
        print(
            f"{'us/send':14} median {statistics.median(times):6.2f}  min {min(times):6.2f}  "
            f"cpu median {statistics.median(cpu):6.2f}  (7 rounds of {n}, {concurrency} producer(s))"
        )
        if "--calls" in sys.argv or "--profile" in sys.argv:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            await rounds(producers, msg, 5000, 1)  # (2000 sends of warm-up, then 5000)
            prof.disable()
            stats = pstats.Stats(prof)
            calls = sum(v[1] for v in stats.stats.values()) / 7000  # type: ignore[attr-defined]
            print(f"{'calls/send':14} {calls:6.1f}")
            if "--profile" in sys.argv:
                at = sys.argv.index("--profile") + 1
                stats.sort_stats(sys.argv[at] if at < len(sys.argv) and not sys.argv[at].startswith("-") else "tottime")
                stats.print_stats(60)


def main_sync(n: int) -> None:
    from pymq.client.sync import Producer as SyncProducer

    body = bytes(range(256)) * 4
    msg = Message(TOPIC, body)
    with SyncProducer("127.0.0.1:1", "client-bench") as producer:
        producer._runner.run(_install(producer.aio))
        for _ in range(1000):
            producer.send(msg)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n // 4):
                producer.send(msg)
            times.append((time.perf_counter() - t0) / (n // 4) * 1e6)
        print(f"{'sync us/send':14} median {statistics.median(times):6.2f}  min {min(times):6.2f}")


async def _install(producer: Producer) -> None:
    install_fake_broker(producer)


if __name__ == "__main__":
    configure_logging("error")
    count = int(sys.argv[sys.argv.index("-n") + 1]) if "-n" in sys.argv else 20000
    concurrency = int(sys.argv[sys.argv.index("--concurrency") + 1]) if "--concurrency" in sys.argv else 1
    if "--sync" in sys.argv:
        main_sync(count)
    else:
        uvloop.run(main(count, concurrency, "--transaction" in sys.argv))
