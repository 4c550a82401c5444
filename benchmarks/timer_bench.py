"""Timer messages at scale, in process (no sockets): memory per pending timer and firing rate.

    python benchmarks/timer_bench.py [--pending 1000000] [--burst 10000] [--json]

* ``pending``: N timer messages (128-byte bodies, due in an hour) go through the broker's put
  path and the timer service files them all. Reported: the process's RSS growth split into
  anonymous memory (Python heap: what the timer service could leak per message) and
  file-backed pages (the mapped commitlog, consume queue, TimerLog and TimerWheel pages the
  kernel may drop), both in MB and as bytes per pending timer, and the filing rate.
* ``burst``: N timers all due in the same second. Reported: how long after their time the
  last one was on its real topic (``lag_ms``) and the delivery rate.

The issue's targets: 1,000,000 pending with RSS < 200 MB above idle; 10,000 firing in one
second delivered with a lag well under a second. Stores live in a temporary directory that is removed.
Run the full form on a quiet machine; ``--pending 2000 --burst 500`` is the smoke form the
test suite runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pymq.broker.put_order import default_put_hooks
from pymq.broker.put_path import PutPath
from pymq.broker.stats import BrokerStats
from pymq.broker.store import MessageStore
from pymq.broker.timer.service import TimerService
from pymq.broker.topics import TopicConfigManager
from pymq.config import BrokerConfig
from pymq.protocol.message import Prop
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.route import TopicConfig

BODY = b"x" * 128


def rss_kb() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                key, value = line.split(":")
                out[key] = int(value.split()[0])
    return out


class Broker:
    """A store, put path and timer service, wired as the broker wires them."""

    def __init__(self, root: Path) -> None:
        self.config = BrokerConfig.model_validate({"store": {"store_dir": str(root / "store")}})
        self.store = MessageStore(self.config.store, store_host="127.0.0.1:10911")
        self.topics = TopicConfigManager(root / "topics.json")
        self.topics.upsert(TopicConfig("orders", 4, 4))
        self.stats = BrokerStats()
        self.timer = TimerService(self)  # type: ignore[arg-type]
        self.put_path = PutPath(self.store, [self.timer.hook, *default_put_hooks(self.config.store.delay_levels_ms)])

    def put_timers(self, n: int, props: dict[str, str], batch: int = 64) -> None:
        record = encode_record(b"orders", BODY, encode_properties(props))
        for i in range(0, n, batch):
            self.put_path.put("orders", i % 4, record * min(batch, n - i))

    def delivered(self) -> int:
        return sum(self.store.max_offset("orders", q) for q in range(4))


async def wait_for(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(0.01)


async def pending_figures(root: Path, n: int) -> dict[str, Any]:
    b = Broker(root)
    b.store.start()
    try:
        await b.timer.start()
        idle = rss_kb()
        t = time.perf_counter()
        b.put_timers(n, {Prop.TIMER_DELAY_MS: str(3_600_000)})
        put_s = time.perf_counter() - t
        await wait_for(lambda: b.timer.enqueued >= n, timeout=60 + n / 1000)
        filed_s = time.perf_counter() - t
        now = rss_kb()
        anon = (now["RssAnon"] - idle["RssAnon"]) * 1024
        file = (now["RssFile"] + now.get("RssShmem", 0) - idle["RssFile"] - idle.get("RssShmem", 0)) * 1024
        return {
            "pending": n,
            "rss_anon_growth_mb": round(anon / 1e6, 1),
            "rss_file_growth_mb": round(file / 1e6, 1),
            "anon_bytes_per_timer": round(anon / n, 1),
            "put_per_s": round(n / put_s),
            "filed_per_s": round(n / filed_s),
            "delivered_early": b.delivered(),
        }
    finally:
        await b.timer.stop()
        b.store.shutdown()


async def burst_figures(root: Path, n: int, ahead_ms: int = 3000) -> dict[str, Any]:
    b = Broker(root)
    b.store.start()
    try:
        await b.timer.start()
        due = int(time.time() * 1000) + ahead_ms
        b.put_timers(n, {Prop.TIMER_DELIVER_MS: str(due)})
        await wait_for(lambda: b.timer.enqueued >= n, timeout=60)
        await wait_for(lambda: b.delivered() > 0, timeout=ahead_ms / 1000 + 30)
        first = time.time() * 1000
        early = first < due
        await wait_for(lambda: b.delivered() >= n, timeout=60)
        last = time.time() * 1000
        return {
            "burst": n,
            "first_lag_ms": round(first - due),
            "lag_ms": round(last - due),
            "delivered_per_s": round(n / max((last - first) / 1000, 1e-3)),
            "early": early,
        }
    finally:
        await b.timer.stop()
        b.store.shutdown()


async def main_async(pending: int, burst: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, fn, n in (("burst", burst_figures, burst), ("pending", pending_figures, pending)):
        if n <= 0:
            continue
        root = Path(tempfile.mkdtemp(prefix="pymq-timer-bench-"))
        try:
            out[name] = await fn(root, n)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--burst", type=int, default=10_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    figures = asyncio.run(main_async(args.pending, args.burst))
    if args.json:
        print(json.dumps(figures))
    else:
        for name, values in figures.items():
            print(name, " ".join(f"{k}={v}" for k, v in values.items()))


if __name__ == "__main__":
    main()
