"""One message model across clients (issues 30 and 31): what RocketMQ's own clients send, pymq's
Spark source and ``pymq-admin consume`` read with body (byte for byte), tags, keys and user
properties intact.

Real daemons, started once for the module: ``pymq-namesrv`` and ``pymq-broker --grpc-port``
(the gRPC front end in the broker's process, RocketMQ's proxy "local mode"). The senders are
the RocketMQ 4.x C++ client (``rocketmq-client-python==0.5.0rc2``, remoting, through the
namesrv) and the RocketMQ 5.x Python client (``rocketmq-python-client==5.1.2``, gRPC), each run
from its own venv as a subprocess. The other direction (pymq's SDK -> the foreign clients) is
covered by ``tests/remoting/test_cpp_consume.py`` (4.x push consumer) and
``tests/rocketmq5/test_producer_consumer.py::test_pymq_sdk_to_5x_simple_consumer``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.daemon_helpers import create_topic, wait_for_route
from tests.remoting.conftest import cpp_python, run_script
from tests.rocketmq5.conftest import rocketmq5_python, run_client

pytestmark = [pytest.mark.integration, pytest.mark.spark]

__all__ = ["cpp_python", "rocketmq5_python"]  # fixtures used here

TOPIC_4X = "from-4x"
TOPIC_5X = "from-5x"

#: binary-ish bodies: NUL bytes, bytes that are not UTF-8, the property separators \x01 \x02, a
#: long one (the C++ client deflates bodies of 4 KiB and more: sysFlag 0x1)
BODIES = [
    b"\x00\x01\x02binary\xff\xfe\x00",
    bytes(range(256)),
    "utf-8 text: h\u00e9llo \u4e16\u754c".encode(),
    bytes(range(256)) * 20,
]


def message_specs(prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "body": body,
            "tag": f"{prefix}Tag{i}" if i != 2 else f"{prefix}T\u00e4g\u4e16{i}",
            "keys": [f"{prefix}-key-{i}", f"order-{i}" if i != 2 else f"\u00f6rder-{i}"],
            "props": {"color": f"c{i}", "who": prefix, "with space": "a b", "unicode": "\u00e9\u4e16"},
        }
        for i, body in enumerate(BODIES)
    ]


class Daemons:
    def __init__(self, workdir: Path, grpc_port: int) -> None:
        self.procs: list[DaemonProcess] = []
        self.ns = namesrv_process(workdir).start()
        self.procs.append(self.ns)
        self.broker = broker_process(workdir, self.ns.address, "broker-a", "--grpc-port", str(grpc_port))
        self.procs.append(self.broker)
        self.broker.start()
        self.endpoint = f"127.0.0.1:{grpc_port}"

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemons]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        grpc_port = s.getsockname()[1]
    d = Daemons(tmp_path_factory.mktemp("foreign-clients"), grpc_port)
    try:

        async def topics() -> None:
            for topic in (TOPIC_4X, TOPIC_5X):
                await create_topic([d.broker], topic, 2)
                await wait_for_route(d.ns.address, topic, 1)

        asyncio.run(topics())
        yield d
    finally:
        d.stop()


def spark_rows(spark: Any, namesrv: str, topic: str) -> list[dict[str, Any]]:
    df = spark.read.format("pymq").option("namesrv", namesrv).option("topic", topic).load()
    return [
        {"body": bytes(r.body), "tags": r.tags, "keys": list(r.keys), "properties": dict(r.properties)}
        for r in df.collect()
    ]


def admin_consume(namesrv: str, topic: str, count: int) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.admin", "--namesrv", namesrv, "--json", "consume", "--topic", topic,
         "--group", f"admin-{topic}", "--count", str(count), "--wait", "5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return [
        {"body": base64.b64decode(m["bodyBase64"]), "tags": m["tags"], "keys": m["keys"], "properties": m["properties"]}
        for m in json.loads(out.stdout)
    ]


def check_rows(rows: list[dict[str, Any]], specs: list[dict[str, Any]], who: str, ordered_keys: bool = True) -> None:
    """Each spec read back exactly once: body byte for byte, tag, keys, every user property.

    ``ordered_keys=False`` for the 5.x client: its ``Message.keys`` is a set, so the order it sends
    them in is not the order they were added in."""
    assert len(rows) == len(specs), (who, rows)
    by_tag = {r["tags"]: r for r in rows}
    for spec in specs:
        row = by_tag.get(spec["tag"])
        assert row is not None, (who, spec["tag"], sorted(by_tag))
        assert row["body"] == spec["body"], (who, spec["tag"], row["body"][:64], spec["body"][:64])
        keys = row["keys"] if ordered_keys else sorted(row["keys"])
        assert keys == (spec["keys"] if ordered_keys else sorted(spec["keys"])), (who, spec["tag"], row["keys"])
        for k, v in spec["props"].items():
            assert row["properties"].get(k) == v, (who, spec["tag"], k, row["properties"])


@pytest.fixture(scope="module")
def sent_by_4x(daemons: Daemons, cpp_python: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    specs = message_specs("cpp")
    wire = [
        {"topic": TOPIC_4X, "body_hex": s["body"].hex(), "tags": s["tag"], "keys": " ".join(s["keys"]),
         "props": s["props"]}
        for s in specs
    ]  # fmt: skip
    home = tmp_path_factory.mktemp("cpp-home")
    proc = run_script(
        cpp_python, "produce_send.py", daemons.ns.address, "sync", json.dumps({"messages": wire}), home=home
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert all("error" not in r and r.get("status") == 0 for r in results), results
    return specs


@pytest.fixture(scope="module")
def sent_by_5x(daemons: Daemons, rocketmq5_python: Path) -> list[dict[str, Any]]:
    specs = message_specs("grpc")
    wire = [{"body_hex": s["body"].hex(), "tag": s["tag"], "keys": s["keys"], "props": s["props"]} for s in specs]
    sent = asyncio.run(
        run_client(rocketmq5_python, "produce.py", {"endpoint": daemons.endpoint, "topic": TOPIC_5X, "messages": wire})
    )
    assert all("message_id" in r for r in sent), sent
    return specs


def test_spark_source_reads_what_the_4x_client_sent(
    spark: Any, daemons: Daemons, sent_by_4x: list[dict[str, Any]]
) -> None:
    check_rows(spark_rows(spark, daemons.ns.address, TOPIC_4X), sent_by_4x, "spark <- 4.x")


def test_spark_source_reads_what_the_5x_client_sent(
    spark: Any, daemons: Daemons, sent_by_5x: list[dict[str, Any]]
) -> None:
    check_rows(spark_rows(spark, daemons.ns.address, TOPIC_5X), sent_by_5x, "spark <- 5.x", ordered_keys=False)


def test_admin_consume_reads_what_the_4x_client_sent(daemons: Daemons, sent_by_4x: list[dict[str, Any]]) -> None:
    check_rows(admin_consume(daemons.ns.address, TOPIC_4X, len(sent_by_4x)), sent_by_4x, "pymq-admin <- 4.x")


def test_admin_consume_reads_what_the_5x_client_sent(daemons: Daemons, sent_by_5x: list[dict[str, Any]]) -> None:
    check_rows(
        admin_consume(daemons.ns.address, TOPIC_5X, len(sent_by_5x)),
        sent_by_5x,
        "pymq-admin <- 5.x",
        ordered_keys=False,
    )
