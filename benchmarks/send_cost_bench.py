"""What pieces of the broker's single send cost, in process: one SEND_MESSAGE frame in -> answer out.

    python benchmarks/send_cost_bench.py [--calls] [--metrics]

A real BrokerApp and Connection with a recording transport; µs per request with each piece
switched off in turn (arrival listeners, put hooks, index, stats), best of 5, interleaved.
``--metrics`` serves the broker's metrics (request metrics on every request, as with a
metrics port). ``--calls`` also counts the Python function calls (cProfile's, C functions included) per send.
"""

import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from pymq.broker.app import BrokerApp
from pymq.broker.store.arrivals import ArrivalListeners
from pymq.client import broker_api
from pymq.config import BrokerConfig
from pymq.logs import configure_logging
from pymq.protocol.frame import encode_bytes
from pymq.protocol.record import encode_properties, encode_record
from pymq.protocol.route import TopicConfig
from pymq.transport.codec import default_codec
from pymq.transport.connection import Connection
from pymq.transport.limits import ConnectionLimits


class FakeTransport:
    def __init__(self):
        self.n = 0

    def writelines(self, bufs):
        self.n += 1

    def write(self, b):
        self.n += 1

    def is_closing(self):
        return False

    def get_extra_info(self, k, d=None):
        return None

    def set_write_buffer_limits(self, high, low):
        pass

    def get_write_buffer_size(self):
        return 0

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


async def main():
    root = Path(tempfile.mkdtemp(prefix="pymq-micro-"))
    settings = {"port": 0, "store": {"store_dir": str(root / "broker")}}
    if "--metrics" in sys.argv:
        settings["metrics_port"] = 0
    app = BrokerApp(BrokerConfig.model_validate(settings))
    await app.start()
    try:
        app.topics.upsert(TopicConfig("bench", 8, 8))
        props = encode_properties({"UNIQ_KEY": "ABCDEF0123456789ABCDEF0123456789"})
        record = encode_record(b"bench", os.urandom(1024), props)
        conn = Connection(app.dispatcher, default_codec(16 << 20), server_side=True, limits=ConnectionLimits())
        t = FakeTransport()
        conn.connection_made(t)
        frames = []
        for i in range(8):
            cmd = broker_api.send_message("bench", i, "bench-group", record)
            cmd.opaque = i + 1
            frames.append(encode_bytes(cmd))

        def run(n):
            for i in range(n):
                conn.data_received(frames[i & 7])

        store = app.store
        variants = {
            "all": lambda: None,
            "no-listeners": lambda: setattr(store, "arrivals", ArrivalListeners()),
            "no-hooks": lambda: setattr(app.put_path, "hooks", ()),
            "no-index": lambda: setattr(store.appender.dispatcher, "put_index", lambda *a: None),
            "no-stats": lambda: (
                setattr(app.stats, "record_put", lambda *a: None),
                setattr(app.stats, "record_put_one", lambda *a: None),
            ),
        }
        saved = {"arrivals": store.arrivals, "hooks": app.put_path.hooks}
        res = {k: 1e9 for k in variants}
        run(3000)
        for _ in range(5):
            for name, apply in variants.items():
                store.arrivals = saved["arrivals"]
                app.put_path.hooks = saved["hooks"]
                for attr in ("put_index",):
                    store.appender.dispatcher.__dict__.pop(attr, None)
                app.stats.__dict__.pop("record_put", None)
                app.stats.__dict__.pop("record_put_one", None)
                apply()
                t0 = time.perf_counter()
                run(10000)
                res[name] = min(res[name], (time.perf_counter() - t0) / 10000 * 1e6)
        for k, v in res.items():
            print(f"{k:14} {v:6.2f} us")
        if "--calls" in sys.argv:
            prof = cProfile.Profile()
            prof.enable()
            run(5000)
            prof.disable()
            calls = sum(v[1] for v in pstats.Stats(prof).stats.values()) / 5000
            print(f"{'calls/send':14} {calls:6.1f}")
    finally:
        await app.close()
        shutil.rmtree(root, ignore_errors=True)


configure_logging("error")
uvloop.run(main())
