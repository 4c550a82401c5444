"""Instructions per single send, counted by callgrind: a figure the machine's load does not move.

    python benchmarks/callgrind_send.py [--tree CHECKOUT] [--what send|put] [--small 2000] [--large 12000]

Timed figures swing 2-3x on a shared machine; instruction counts do not (valgrind counts what
the CPU executes, not how long it waited). This runs a real ``BrokerApp`` in one process under
``valgrind --tool=callgrind`` twice, with ``--small`` and ``--large`` operations, and prints the
difference per operation, so start-up and shutdown cancel out:

* ``send``: one SEND_MESSAGE of a 1 KiB record through the app's dispatcher with a fake channel
  (typed header, topic checks, put path, store, response), as ``put_path_bench.py``'s
  ``dispatch_send`` does;
* ``put``: ``MessageStore.put`` of the same record.

``--tree`` measures another checkout with this interpreter (its ``pymq`` first on the path; copy
the built ``pymq/_speedups*.so`` into it, or it runs the pure-Python record code). Background
threads (flush, warmer) add a little that grows with wall time: compare trees, not absolutes.
Issue 29 used it to decide the single-record fast path: a send as a batch of one (no
``put_single``/``append_one``/``dispatch_one``/``record_put_one``/inline answer) took 121.7k
instructions against 86.5k with them (+41 %), so the fast path stays.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


async def _run(root: Path, n: int, what: str) -> None:
    from pymq.broker.app import BrokerApp
    from pymq.config import BrokerConfig
    from pymq.protocol.codes import RequestCode
    from pymq.protocol.frame import Command
    from pymq.protocol.record import encode_properties, encode_record
    from pymq.protocol.route import TopicConfig

    sys.path.insert(0, str(HERE))
    from put_path_bench import _Channel

    app = BrokerApp(BrokerConfig.model_validate({"port": 0, "store": {"store_dir": str(root / "broker")}}))
    await app.start()
    try:
        app.topics.upsert(TopicConfig("bench", 8, 8))
        props = encode_properties({"UNIQ_KEY": "ABCDEF0123456789ABCDEF0123456789"})
        record = memoryview(encode_record(b"bench", b"x" * 1024, props))
        channel = _Channel()
        code = int(RequestCode.SEND_MESSAGE)
        if what == "send":
            for i in range(n):
                ext = {"topic": "bench", "queueId": i & 7, "producerGroup": "bench"}
                app.dispatcher.dispatch(channel, Command(code, i, 0, None, ext, record))  # type: ignore[arg-type]
        else:
            store = app.store
            assert store is not None
            for i in range(n):
                store.put("bench", i & 7, record)
    finally:
        await app.close()


def _child(what: str, n: int) -> None:
    from pymq.logs import configure_logging

    configure_logging("error")
    root = Path(tempfile.mkdtemp(prefix="pymq-callgrind-"))
    try:
        asyncio.run(_run(root, n, what))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def instructions(tree: Path | None, what: str, n: int) -> int:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/callgrind.out",
                sys.executable,
                __file__,
                "--child",
                what,
                str(n),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="another checkout to measure (default: the installed pymq)")
    parser.add_argument("--what", choices=["send", "put"], default="send")
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--large", type=int, default=12000)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    small = instructions(args.tree, args.what, args.small)
    large = instructions(args.tree, args.what, args.large)
    per_op = (large - small) / (args.large - args.small)
    print(f"{args.what}: {per_op:,.0f} instructions per operation ({args.tree or 'installed pymq'})")


if __name__ == "__main__":
    main()
