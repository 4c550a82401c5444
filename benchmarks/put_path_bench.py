"""The broker's per-send cost in process, without sockets: where a single send's CPU goes.

    python benchmarks/put_path_bench.py [--json]

* ``store_put``: ``MessageStore.put`` (``put_messages`` before issue 29) of one 1 KiB record (µs per put).
* ``path_put``: the same through the broker's put path (hooks, then the store; the store's
  own put on trees older than the put path, so old and new compare).
* ``path_put_batch64``: 64 such records in one batch through the put path (µs per batch).
* ``dispatch_send``: one SEND_MESSAGE through a real ``BrokerApp``'s dispatcher with a fake
  channel: typed header, topic checks, put path, response (µs per send).

Each figure is the best of 5 rounds. Stores live in a temporary directory that is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymq.broker.app import BrokerApp
from pymq.broker.store import MessageStore
from pymq.config import BrokerConfig, StoreConfig
from pymq.logs import configure_logging
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.route import TopicConfig

try:  # the put path exists from issue 13 on; older trees measure the store and the dispatch only
    from pymq.broker.put_order import default_put_hooks
    from pymq.broker.put_path import PutPath
except ImportError:  # pragma: no cover - comparing with an older checkout
    PutPath = None  # type: ignore[assignment,misc]

PROPS = encode_properties({"UNIQ_KEY": "ABCDEF0123456789ABCDEF0123456789"})


def best_us(fn: Callable[[int], None], n: int, rounds: int = 5) -> float:
    for i in range(min(n, 2000)):
        fn(i)
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for i in range(n):
            fn(i)
        best = min(best, (time.perf_counter() - t) / n)
    return round(best * 1e6, 2)


def store_figures(root: Path) -> dict[str, float]:
    store = MessageStore(StoreConfig(store_dir=root / "store"), store_host="127.0.0.1:10911")
    store_put = getattr(store, "put", None) or store.put_messages  # put_messages before issue 29
    # Without a put path (older trees) the store's own put is what the broker calls.
    put = PutPath(store, default_put_hooks(store.config.delay_levels_ms)).put if PutPath else store_put
    store.start()
    try:
        one = memoryview(encode_record(b"bench", os.urandom(1024), PROPS))
        batch = memoryview(b"".join(encode_record(b"bench", os.urandom(1024), PROPS) for _ in range(64)))
        return {
            "store_put_us": best_us(lambda i: store_put("bench", i & 7, one), 20000),
            "path_put_us": best_us(lambda i: put("bench", i & 7, one), 20000),
            "path_put_batch64_us": best_us(lambda i: put("bench", i & 7, batch), 1000),
        }
    finally:
        store.shutdown()


class _Channel:
    """Just enough of a server channel for the dispatcher to answer into."""

    def __init__(self) -> None:
        self.inflight = 0
        self.remote_addr = "bench"
        self.attrs: dict[str, Any] = {}

    def write_command(self, cmd: Command) -> None:
        pass

    def handler_finished(self) -> None:
        self.inflight -= 1


async def dispatch_figure(root: Path) -> dict[str, float]:
    app = BrokerApp(BrokerConfig.model_validate({"port": 0, "store": {"store_dir": str(root / "broker")}}))
    await app.start()
    try:
        app.topics.upsert(TopicConfig("bench", 8, 8))
        record = memoryview(encode_record(b"bench", os.urandom(1024), PROPS))
        channel = _Channel()
        code = int(RequestCode.SEND_MESSAGE)

        def send(i: int) -> None:
            ext = {"topic": "bench", "queueId": i & 7, "producerGroup": "bench"}
            app.dispatcher.dispatch(channel, Command(code, i, 0, None, ext, record))  # type: ignore[arg-type]

        return {"dispatch_send_us": best_us(send, 20000)}
    finally:
        await app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configure_logging("error")
    root = Path(tempfile.mkdtemp(prefix="pymq-put-bench-"))
    try:
        figures = {**store_figures(root), **asyncio.run(dispatch_figure(root))}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for name, value in figures.items():
            print(f"{name:24} {value:10.2f}")


if __name__ == "__main__":
    main()
