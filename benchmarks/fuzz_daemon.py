"""Fuzz live daemons: malformed frames, random headers, bad bodies and valid-but-hostile requests
against a real nameserver and broker (child processes), while a well-behaved producer keeps
sending and checks that nothing it had acknowledged is lost.

    python benchmarks/fuzz_daemon.py --inputs 1000000 --workers 8 [--seed 1] [--json]
    python benchmarks/fuzz_daemon.py --duration 60 --acl   # daemons enforce ACL; inputs signed or forged

Reports inputs per second (by kind), the good producer's sends, acknowledgements and errors,
whether both daemons stayed up, how many acknowledged messages could not be read back (must
be 0) and how many requests a handler failed on with an unexpected exception (SYSTEM_ERROR
with a traceback in the daemon's log: each one a bug). "Inputs" are inputs written; a
connection the daemon closes after a malformed one ends there. Exit code 0 when the run is clean, 1 otherwise. The bounded form runs in the test
suite (tests/integration/test_fuzz_daemon.py, marker ``fuzz``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from pymq.client import Message, Producer
from pymq.client.queue_reader import QueueReader
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import FrameDecoder, encode_bytes
from pymq.protocol.headers import encode_body
from pymq.protocol.message import iter_messages
from pymq.protocol.record import encode_record
from pymq.security.signing import Credentials, sign
from pymq.testing import DaemonProcess, broker_process, namesrv_process

#: the well-behaved producer's topic and the names fuzzing must never touch destructively
GOOD_TOPIC = "FuzzGoodTopic"
#: requests that would legitimately break the good producer (delete its topic, re-register its
#: broker elsewhere, change broker config): fuzzed only with names of the fuzzer's own
DESTRUCTIVE = {
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.RESET_CONSUMER_OFFSET,
}
CODES = [int(c) for c in RequestCode if c not in DESTRUCTIVE]

# --acl: the daemons enforce this ACL file; the good client is an admin, the fuzzer signs half of
# its well-framed inputs as "fuzz-app" (no admin, every topic but the good one) and forges the rest
GOOD_ACCOUNT = {"access_key": "fuzz-good", "secret_key": "fuzz-good-secret"}
FUZZ_CREDS = Credentials("fuzz-app", "fuzz-app-secret")
ACL_FILE = f"""
[[accounts]]
access_key = "broker"
secret_key = "broker-secret"
admin = true
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"

[[accounts]]
access_key = "fuzz-good"
secret_key = "fuzz-good-secret"
admin = true
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"

[[accounts]]
access_key = "fuzz-app"
secret_key = "fuzz-app-secret"
default_topic_perm = "PUB|SUB"
default_group_perm = "SUB"
topic_perms = {{ {GOOD_TOPIC} = "DENY" }}
"""


def good_client(acl: bool) -> dict[str, Any]:
    return dict(GOOD_ACCOUNT) if acl else {}


FUZZ_TOPICS = [f"fuzz-{i}" for i in range(16)] + ["%RETRY%fuzz", "%DLQ%fuzz", "", "a" * 300, "bad topic/../x"]
KINDS = ("garbage", "bad_length", "bad_header", "truncated", "random_header", "bad_body", "hostile")


def frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def header(code: int, ext: Any, *, opaque: int = 1, flags: int = 0, remark: Any = None) -> bytes:
    packed: bytes = msgpack.packb([code, opaque, flags, remark, ext], use_bin_type=True)
    return packed


class Inputs:
    """Generates one input (bytes to write) of a given kind from a seeded generator."""

    def __init__(self, rng: random.Random, creds: Credentials | None = None) -> None:
        self.rng = rng
        self.opaque = 0
        #: with ACL on: the fuzz account; well-framed inputs are then signed with it, or carry
        #: forged signing fields, or none
        self.creds = creds

    def make(self, kind: str) -> tuple[bytes, bool]:
        data, last = self._make(kind)
        if self.creds is not None and kind in ("random_header", "bad_body", "hostile"):
            data = self._sign_or_forge(data)
        return data, last

    def _sign_or_forge(self, data: bytes) -> bytes:
        r = self.rng
        (cmd,) = FrameDecoder().feed(data)
        choice = r.random()
        if choice < 0.5:
            sign(cmd, self.creds, time.time_ns() // 1_000_000)  # type: ignore[arg-type]
        elif choice < 0.8:
            forged = {"AccessKey": r.choice([self.creds.access_key, "nobody", 5, None, "é"]),  # type: ignore[union-attr]
                      "Signature": r.choice(["AAAA", "é", 7, b"x", None]),
                      "Timestamp": r.choice([time.time_ns() // 1_000_000, 0, -1, 2**62, 1.5, "now", True]),
                      "Nonce": self.value(1)}  # fmt: skip
            cmd.ext.update(forged)
        return encode_bytes(cmd)

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        choice = r.randrange(12 if depth < 2 else 9)
        if choice == 0:
            return r.randrange(-(2**63), 2**63)
        if choice == 1:
            return r.choice([0, -1, 1, 2**31, 2**31 - 1, -(2**31), 2**63 - 1, 1024, 1025])
        if choice == 2:
            return r.choice([1.5, -0.0, 1e300, float("nan"), float("inf"), 2.0])
        if choice == 3:
            return "".join(r.choice("abc%/\x00é 9-_") for _ in range(r.randrange(0, 40)))
        if choice == 4:
            return r.choice(FUZZ_TOPICS)
        if choice == 5:
            return r.randbytes(r.randrange(0, 64))
        if choice == 6:
            return r.choice([None, True, False])
        if choice == 7:
            return str(r.randrange(-(10**20), 10**20))
        if choice == 8:
            return ""
        if choice == 9:
            return [self.value(depth + 1) for _ in range(r.randrange(0, 5))]
        return {str(self.value(depth + 1))[:20]: self.value(depth + 1) for _ in range(r.randrange(0, 5))}

    def ext(self) -> dict[str, Any]:
        r = self.rng
        names = ["topic", "queueId", "consumerGroup", "queueOffset", "maxMsgNums", "maxBytes", "sysFlag",
                 "commitOffset", "suspendTimeoutMillis", "subscription", "group", "offset", "key", "maxNum",
                 "brokerName", "brokerAddr", "clusterName", "brokerId", "timestamp", "readQueueNums",
                 "writeQueueNums", "perm", "producerGroup", "clientID", "delayLevel", "originTopic"]  # fmt: skip
        return {
            r.choice(names) if r.random() < 0.8 else str(self.value(1))[:16]: self.value()
            for _ in range(r.randrange(0, 8))
        }

    def record(self) -> bytes:
        r = self.rng
        rec = encode_record(r.choice(FUZZ_TOPICS).encode(), r.randbytes(r.randrange(0, 256)), b"")
        if r.random() < 0.7:  # mutate a few bytes
            b = bytearray(rec)
            for _ in range(r.randrange(1, 6)):
                b[r.randrange(len(b))] = r.randrange(256)
            rec = bytes(b[: r.randrange(1, len(b) + 1)] if r.random() < 0.3 else b)
        return rec

    def _make(self, kind: str) -> tuple[bytes, bool]:
        """(bytes, whether the connection should end right after them)."""
        r = self.rng
        self.opaque += 1
        if kind == "garbage":
            return r.randbytes(r.randrange(1, 2048)), True
        if kind == "bad_length":
            n = r.choice([0, 1, 3, 2**31, 2**32 - 1, 17 * 1024 * 1024 + 8])
            hl = r.choice([0, 2**31, n + 100, 5])
            return struct.pack(">II", n, hl) + r.randbytes(r.randrange(0, 64)), True
        if kind == "bad_header":
            raw = r.choice(
                [
                    r.randbytes(r.randrange(1, 64)),
                    msgpack.packb({"code": 10}),
                    msgpack.packb([10, 1]),
                    msgpack.packb([10, 1, 0, None, "not a map"]),
                    msgpack.packb(["10", "1", "0", 5, {}]),
                    msgpack.packb([10, 1, 0, None, {1: 2, "x": {"y": [1]}}]),
                    msgpack.packb([2**63 - 1, -1, 255, "r", {}]),
                ]
            )
            return frame(raw, r.randbytes(r.randrange(0, 32))), r.random() < 0.5
        if kind == "truncated":
            full = frame(header(r.choice(CODES), self.ext(), opaque=self.opaque), r.randbytes(r.randrange(0, 512)))
            return full[: r.randrange(1, len(full))], True
        if kind == "random_header":
            code = r.choice(CODES) if r.random() < 0.85 else r.randrange(-(2**31), 2**31)
            flags = r.choice([0, 0, 0, 1, 2, 3, r.randrange(256)])
            return frame(
                header(
                    code,
                    self.ext(),
                    opaque=self.opaque,
                    flags=flags,
                    remark=str(self.value(1))[:64] if r.random() < 0.2 else None,
                ),
                r.randbytes(r.randrange(0, 128)),
            ), False
        if kind == "bad_body":
            code = r.choice(
                [RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE, RequestCode.HEART_BEAT,
                 RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
                 RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                 RequestCode.CONSUMER_SEND_MSG_BACK]
            )  # fmt: skip
            ext = {"topic": r.choice(FUZZ_TOPICS), "queueId": r.randrange(-2, 10), "group": "fuzz"}
            body = r.choice(
                [
                    self.record(),
                    self.record() + self.record(),
                    encode_body(self.value()),
                    encode_body({"clientID": self.value(), "consumerDataSet": [self.value() for _ in range(3)]}),
                    encode_body({"consumerGroup": "fuzz", "clientId": "x", "mqSet": self.value()}),
                    r.randbytes(r.randrange(0, 1024)),
                ]
            )
            return frame(header(int(code), ext, opaque=self.opaque), body), False
        return self.hostile(), False

    def hostile(self) -> bytes:
        """Valid requests a hostile client may send: far offsets, held pulls, stray groups, fuzz topics."""
        r = self.rng
        topic = r.choice([*FUZZ_TOPICS[:16], GOOD_TOPIC])
        group = f"fuzz-group-{r.randrange(50)}"
        choice = r.randrange(9)
        if choice == 0:
            ext = {"consumerGroup": group, "topic": topic, "queueId": r.randrange(0, 8),
                   "queueOffset": r.choice([0, 2**62, -5]), "maxMsgNums": r.choice([1, 1024]),
                   "sysFlag": r.choice([0, 2, 3, 7]), "commitOffset": -1,
                   "suspendTimeoutMillis": r.choice([0, 1000, 15000])}  # fmt: skip
            return frame(header(RequestCode.PULL_MESSAGE, ext, opaque=self.opaque))
        if choice == 1 and topic != GOOD_TOPIC:
            body = encode_record(topic.encode(), r.randbytes(r.randrange(0, 2048)), b"")
            ext = {"topic": topic, "queueId": r.randrange(-1, 4), "producerGroup": "fuzz"}
            return frame(header(RequestCode.SEND_MESSAGE, ext, opaque=self.opaque), body)
        if choice == 2:
            ext = {
                "consumerGroup": group,
                "topic": topic,
                "queueId": r.randrange(0, 8),
                "commitOffset": r.randrange(0, 2**40),
            }
            return frame(header(RequestCode.UPDATE_CONSUMER_OFFSET, ext, opaque=self.opaque))
        if choice == 3:
            groups = [{"groupName": f"fuzz-group-{r.randrange(50)}", "consumeType": "CONSUME_ACTIVELY",
                       "messageModel": r.choice(["CLUSTERING", "BROADCASTING", "x"]),
                       "subscriptionDataSet": [
                           {"topic": r.choice(FUZZ_TOPICS), "subString": r.choice(["*", "a||b", "||"])}
                       ]}
                      for _ in range(r.randrange(1, 20))]  # fmt: skip
            body = encode_body(
                {"clientID": f"fuzz@{r.randrange(100)}", "consumerDataSet": groups, "producerDataSet": []}
            )
            return frame(header(RequestCode.HEART_BEAT, {}, opaque=self.opaque), body)
        if choice == 4:
            name = r.choice(FUZZ_TOPICS[:16])
            ext = {"topic": name, "readQueueNums": r.randrange(1, 9), "writeQueueNums": r.randrange(1, 9), "perm": 6}
            return frame(header(RequestCode.UPDATE_AND_CREATE_TOPIC, ext, opaque=self.opaque))
        if choice == 5:
            ext = {
                "topic": topic,
                "key": self.value(1),
                "maxNum": r.choice([1, 64, 2**31]),
                "beginTimestamp": 0,
                "endTimestamp": 2**62,
            }
            return frame(header(RequestCode.QUERY_MESSAGE, ext, opaque=self.opaque))
        if choice == 6:
            return frame(
                header(
                    RequestCode.VIEW_MESSAGE_BY_ID,
                    {"offset": r.choice([0, 2**40, -1, r.randrange(0, 10**6)])},
                    opaque=self.opaque,
                )
            )
        if choice == 7:
            return frame(header(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, opaque=self.opaque))
        return frame(
            header(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}, opaque=self.opaque)
        )


@dataclass
class Report:
    seconds: float = 0.0
    inputs: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    #: frames the daemons sent back (answers, and pushes to fuzzed heartbeats)
    frames_received: int = 0
    connect_failures: int = 0
    good_sent: int = 0
    good_acked: int = 0
    good_errors: int = 0
    good_error_samples: list[str] = field(default_factory=list)
    lost: int = 0
    daemons_alive: bool = True
    dead: list[str] = field(default_factory=list)
    #: requests a handler failed on with an unexpected exception (SYSTEM_ERROR, logged with a
    #: traceback): each is a bug to fix, though the daemon stays up
    handler_failures: int = 0
    failure_samples: list[str] = field(default_factory=list)

    @property
    def inputs_per_sec(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    @property
    def clean(self) -> bool:
        return self.daemons_alive and self.good_errors == 0 and self.lost == 0 and self.good_acked > 0

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "by_kind"}
        d["by_kind"] = dict(self.by_kind)
        d["inputs_per_sec"] = round(self.inputs_per_sec, 1)
        d["clean"] = self.clean
        return d


async def _fuzz_connection(
    addr: str, gen: Inputs, kinds: list[str], weights: list[float], report: Report, budget: int
) -> int:
    """One connection: up to ``budget`` inputs written, answers read until the server closes or goes quiet."""
    host, port = addr.rsplit(":", 1)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
    except (OSError, TimeoutError):
        report.connect_failures += 1
        return 0
    report.connections += 1
    sent = 0
    try:
        for _ in range(budget):
            if writer.is_closing() or reader.at_eof():
                break
            kind = gen.rng.choices(kinds, weights)[0]
            data, last = gen.make(kind)
            writer.write(data)
            sent += 1
            report.by_kind[kind] += 1
            if last:
                break
        if not writer.is_closing():
            writer.write_eof()
            await writer.drain()
        decoder = FrameDecoder()
        while True:  # read the answers (the server's writes must never block on us)
            chunk = await asyncio.wait_for(reader.read(1 << 20), 0.5)
            if not chunk:
                break
            report.frames_received += len(decoder.feed(chunk))
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
    return sent


#: kinds that keep the connection usable (sent pipelined, many per connection), and the ones that end it
STREAM_KINDS = (["random_header", "bad_body", "hostile"], [3.0, 2.0, 2.0])
ENDING_KINDS = (["garbage", "bad_length", "bad_header", "truncated"], [1.0, 1.0, 1.0, 1.0])


async def _fuzz_worker(
    addrs: list[str], seed: int, stop: asyncio.Event, report: Report, limit: list[int], creds: Credentials | None
) -> None:
    """Connections of two sorts: many well-framed hostile inputs pipelined on one connection, or
    a few of them followed by one malformed input that ends it (the server must close only that one)."""
    gen = Inputs(random.Random(seed), creds)
    while not stop.is_set() and limit[0] > 0:
        addr = gen.rng.choice(addrs)
        if gen.rng.random() < 0.7:
            budget = min(limit[0], gen.rng.randrange(1, 500))
            n = await _fuzz_connection(addr, gen, *STREAM_KINDS, report, budget)
        else:
            n = await _fuzz_connection(addr, gen, *ENDING_KINDS, report, 1)
        limit[0] -= n
        report.inputs += n


async def _good_producer(
    namesrv: str, stop: asyncio.Event, report: Report, acked: dict[bytes, tuple[str, int, int]], client: dict[str, Any]
) -> None:
    """Sends one message every few ms for the whole run; every send must succeed."""
    async with Producer(namesrv, "fuzz-good-producer", send_timeout=10.0, **client) as producer:
        i = 0
        while not stop.is_set():
            body = f"good-{i}".encode()
            report.good_sent += 1
            try:
                r = await producer.send(Message(GOOD_TOPIC, body))
                acked[body] = (r.message_queue.brokerName, r.message_queue.queueId, r.queue_offset)
                report.good_acked += 1
            except PymqError as exc:
                report.good_errors += 1
                if len(report.good_error_samples) < 5:
                    report.good_error_samples.append(f"{type(exc).__name__}: {exc}")
            i += 1
            await asyncio.sleep(0.005)


def _read_back(namesrv: str, acked: dict[bytes, tuple[str, int, int]], client: dict[str, Any]) -> int:
    """How many acknowledged messages cannot be read back at their queue offsets."""
    found: set[bytes] = set()
    with QueueReader(namesrv, timeout=10, **client) as reader:
        by_queue: dict[tuple[str, int], list[int]] = {}
        for broker, qid, offset in acked.values():
            by_queue.setdefault((broker, qid), []).append(offset)
        for (broker, qid), offsets in by_queue.items():
            for body, _next in reader.read_range((GOOD_TOPIC, broker, qid), min(offsets), max(offsets) + 1):
                found.update(m.body for m in iter_messages(body))
    return sum(1 for b in acked if b not in found)


async def run_fuzz(
    namesrv: str,
    broker: str,
    *,
    duration: float | None,
    inputs: int | None,
    workers: int = 8,
    seed: int = 1,
    processes: list[DaemonProcess] | None = None,
    acl: bool = False,
) -> Report:
    """Fuzz both daemons for ``duration`` seconds or ``inputs`` inputs, with the good producer running
    (``acl``: the daemons were started with :data:`ACL_FILE`)."""
    client = good_client(acl)
    report = Report()
    stop = asyncio.Event()
    acked: dict[bytes, tuple[str, int, int]] = {}
    limit = [inputs if inputs is not None else 2**62]
    good = asyncio.ensure_future(_good_producer(namesrv, stop, report, acked, client))
    await asyncio.sleep(0.5)  # the good producer has its route
    started = time.monotonic()
    tasks = [
        asyncio.ensure_future(
            _fuzz_worker([namesrv, broker], seed * 1000 + i, stop, report, limit, FUZZ_CREDS if acl else None)
        )
        for i in range(workers)
    ]

    async def watch() -> None:
        while not stop.is_set():
            for p in processes or []:
                if not p.running():
                    report.daemons_alive = False
                    report.dead.append(p.kind)
                    stop.set()
            if duration is not None and time.monotonic() - started >= duration:
                stop.set()
            if limit[0] <= 0:
                stop.set()
            await asyncio.sleep(0.2)

    watcher = asyncio.ensure_future(watch())
    await stop.wait()
    await asyncio.gather(*tasks, return_exceptions=True)
    report.seconds = time.monotonic() - started
    await good
    watcher.cancel()
    for p in processes or []:
        if not p.running() and p.kind not in report.dead:
            report.daemons_alive = False
            report.dead.append(p.kind)
    if report.daemons_alive:
        report.lost = await asyncio.to_thread(_read_back, namesrv, acked, client)
    for p in processes or []:
        for line in p.output().splitlines():
            if "handler_failed" in line:
                report.handler_failures += 1
                if len(report.failure_samples) < 5:
                    report.failure_samples.append(f"{p.kind}: {line[:300]}")
    return report


def daemon_env(workdir: Path, acl: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(nameserver env, broker env): ACL on both with :data:`ACL_FILE` when ``acl``."""
    if not acl:
        return {}, {}
    path = workdir / "acl.toml"
    path.write_text(ACL_FILE)
    env = {"PYMQ_ACL__ENABLE": "true", "PYMQ_ACL__FILE": str(path)}
    return env, {**env, "PYMQ_ACL__ACCESS_KEY": "broker", "PYMQ_ACL__SECRET_KEY": "broker-secret"}


def start_daemons(workdir: Path, acl: bool = False) -> tuple[DaemonProcess, DaemonProcess]:
    ns_env, broker_env = daemon_env(workdir, acl)
    ns = namesrv_process(workdir, env=ns_env).start()
    try:
        broker = broker_process(workdir, ns.address, "broker-a", env=broker_env).start()
    except BaseException:
        ns.stop()
        raise
    return ns, broker


def create_good_topic(namesrv: str, acl: bool = False) -> None:
    client = good_client(acl)
    cli = ["--access-key", client["access_key"], "--secret-key", client["secret_key"]] if acl else []
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "pymq.cli.admin", "--namesrv", namesrv, *cli,
         "topic-create", "--topic", GOOD_TOPIC, "--queues", "4"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    from pymq.client.admin import AdminClient

    async def wait_route() -> None:
        async with AdminClient(namesrv, **client) as admin:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await admin.topic_route(GOOD_TOPIC)
                    return
                except PymqError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)

    asyncio.run(wait_route())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--inputs", type=int, default=None, help="stop after this many inputs (default 1,000,000 unless --duration)"
    )
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--acl", action="store_true", help="daemons enforce ACL; half the inputs signed, the rest forged")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    logging.getLogger("asyncio").setLevel(logging.ERROR)  # writes to connections the daemon closed
    if args.inputs is None and args.duration is None:
        args.inputs = 1_000_000
    with tempfile.TemporaryDirectory(prefix="pymq-fuzz-") as tmp:
        ns, broker = start_daemons(Path(tmp), args.acl)
        try:
            create_good_topic(ns.address, args.acl)
            report = asyncio.run(
                run_fuzz(ns.address, broker.address, duration=args.duration, inputs=args.inputs,
                         workers=args.workers, seed=args.seed, processes=[ns, broker], acl=args.acl)
            )  # fmt: skip
        finally:
            broker.stop()
            ns.stop()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        d = report.as_dict()
        print(
            f"{d['inputs']:,} inputs in {d['seconds']:.1f} s = {d['inputs_per_sec']:,.0f} inputs/s "
            f"over {d['connections']:,} connections"
        )
        print("  by kind: " + ", ".join(f"{k}={v:,}" for k, v in sorted(d["by_kind"].items())))
        print(
            f"  good producer: sent {d['good_sent']:,}, acked {d['good_acked']:,}, "
            f"errors {d['good_errors']}, lost {d['lost']}"
        )
        print(f"  daemons alive: {d['daemons_alive']} {d['dead'] or ''}; clean: {d['clean']}")
        for s in d["good_error_samples"]:
            print(f"  error: {s}")
        print(f"  handler failures (SYSTEM_ERROR with a traceback): {d['handler_failures']}")
        for s in d["failure_samples"]:
            print(f"    {s}")
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
