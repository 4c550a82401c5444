"""examples/spark_tag_counts.py runs (briefly) against a real cluster, its two queries under two consumer groups."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.client.queue_reader import QueueReader
from pymq.client.sync import Message, Producer

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_tag_counts.py"


@pytest.mark.skipif(shutil.which("java") is None and os.environ.get("CI") != "true", reason="needs Java 17 or 21")
def test_tag_counts_example_runs_with_a_group_per_query(pymq_cluster, tmp_path: Path) -> None:
    """The example runs for a few seconds and exits cleanly; each query stored its progress under its own group."""
    ns = pymq_cluster.namesrv
    pymq_cluster.create_topic("ex-orders", 2)
    pymq_cluster.create_topic("ex-counts", 2)
    with Producer(ns, "spark-example") as p:
        for i in range(30):
            p.send(Message("ex-orders", b"order-%d" % i, tags="AB"[i % 2]))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    args = ["--namesrv", ns, "--topic", "ex-orders", "--counts-topic", "ex-counts", "--out", str(tmp_path / "out")]
    # Run until both queries have committed every position (what a user watching the lag
    # would wait for), then Ctrl-C it: the example must stop its queries and exit cleanly.
    # --seconds bounds it should the queries never catch up.
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), *args, "--group", "ex", "--seconds", "120"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with QueueReader(ns) as reader:
            queues = reader.queues(["ex-orders"])
            ends = {q: hi for q, (_, hi) in reader.min_max(queues).items()}

            def committed() -> dict[str, dict]:
                return {g: {q: reader.committed(g, q) for q in queues} for g in ("ex-parquet", "ex-pymq")}

            deadline = time.monotonic() + 180
            while committed() != {"ex-parquet": ends, "ex-pymq": ends}:
                assert proc.poll() is None, f"the example exited early: {proc.communicate()[1][-3000:]}"
                assert time.monotonic() < deadline, f"not caught up: {committed()} != {ends}"
                time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "counting tags of 'ex-orders'" in out
    assert sum(ends.values()) == 30
