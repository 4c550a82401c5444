"""Prometheus endpoints of an in-process broker and nameserver, scraped over HTTP on loopback."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer
from pymq.config import NamesrvConfig
from pymq.errors import ConfigError
from pymq.nameserver.app import NamesrvApp
from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import Command
from pymq.testing import DaemonProcess, LocalCluster, namesrv_process
from pymq.transport.client import RpcClient
from tests.helpers import wait_until
from tests.metrics_helpers import http_get, scrape, value

pytestmark = pytest.mark.integration
prom_parser = pytest.importorskip("prometheus_client.parser")  # the pymq-rocket[metrics] extra

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
README = DEPLOY / "README.md"
FAST = {
    "rebalance_interval_seconds": 1.0,
    "heartbeat_interval_seconds": 1.0,
    "persist_offset_interval_seconds": 0.5,
}
SENT = 20
GROUP = "metrics-g"


def names(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+)", text, re.M))


@pytest.fixture
async def traffic(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, PullConsumer, dict[int, int]]]:
    """A cluster with metrics on, SENT messages produced and consumed, one queue committed short."""
    async with LocalCluster(tmp_path / "c", broker={"metrics_port": 0}, namesrv={"metrics_port": 0}) as cluster:
        await cluster.create_topic("orders", 4)
        broker = cluster.brokers[0]
        broker.stats.sample()
        async with Producer(cluster.namesrv_addr, "metrics-p") as producer:
            for i in range(SENT):
                await producer.send(Message("orders", f"body-{i}".encode()))
        broker.stats.sample()
        consumer = PullConsumer(
            cluster.namesrv_addr,
            GROUP,
            auto_commit=False,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **FAST,
        )
        consumer.subscribe("orders")
        async with consumer:
            got = []
            while len(got) < SENT:
                got += await consumer.poll(timeout=5.0)
            assert len(got) == SENT
            broker.stats.sample()
            maxes = {q: broker.store.max_offset("orders", q) for q in range(4)}
            short = max(maxes, key=lambda q: maxes[q])  # committed at 1: lag = max - 1
            committed = {q: (1 if q == short else maxes[q]) for q in maxes}
            queues = {mq.queueId: mq for mq in consumer.assigned_queues() if mq.topic == "orders"}
            await consumer.commit({queues[q]: off for q, off in committed.items()})
            await wait_until(
                lambda: all(broker.offsets.query(GROUP, "orders", q) == o for q, o in committed.items()),
                what="offsets committed",
            )
            yield cluster, consumer, maxes


async def test_broker_metrics_serve_every_series(traffic) -> None:
    """Broker series: requests, latency, messages put/got, store, commitlog, lag, clients, held pulls."""
    cluster, _consumer, maxes = traffic
    broker = cluster.brokers[0]
    async with RpcClient() as rpc:  # one failing request
        resp = await rpc.invoke(broker.address, Command.request(RequestCode.SEND_MESSAGE, {"topic": "no-such-topic"}))
        assert resp.code != 0
    await wait_until(lambda: broker.pull_hold.held_count > 0, what="a held pull")
    text, s = await scrape(broker.metrics.url)

    info = [k for k in s if k[0] == "pymq_broker_info"]
    assert len(info) == 1 and ("broker", "broker-a") in info[0][1]
    assert value(s, "pymq_requests_total", code="SEND_MESSAGE", result="ok") == SENT
    assert value(s, "pymq_requests_total", code="SEND_MESSAGE", result="error") == 1
    assert value(s, "pymq_requests_total", code="PULL_MESSAGE", result="ok") >= 1
    assert value(s, "pymq_request_duration_seconds_count", code="SEND_MESSAGE") == SENT + 1
    assert value(s, "pymq_request_duration_seconds_bucket", code="SEND_MESSAGE", le="+Inf") == SENT + 1
    assert value(s, "pymq_put_messages_total", topic="orders") == SENT
    assert value(s, "pymq_get_messages_total", topic="orders") == SENT
    stored = sum(len(f"body-{i}") for i in range(SENT))
    assert value(s, "pymq_put_bytes_total", topic="orders") > stored
    assert value(s, "pymq_get_bytes_total", topic="orders") == value(s, "pymq_put_bytes_total", topic="orders")
    assert value(s, "pymq_put_failures_total") == 0
    assert value(s, "pymq_store_size_bytes") > 0
    assert 0 < value(s, "pymq_disk_used_ratio") < 1 and value(s, "pymq_disk_full") == 0
    assert value(s, "pymq_store_queue_file_backlog") == 0 and value(s, "pymq_store_pending_queue_files") >= 0
    assert value(s, "pymq_commitlog_min_offset_bytes") == 0
    assert value(s, "pymq_commitlog_max_offset_bytes") == broker.store.commitlog.max_offset > 0
    assert value(s, "pymq_commitlog_flushed_offset_bytes") <= value(s, "pymq_commitlog_max_offset_bytes")
    short = max(maxes, key=lambda q: maxes[q])
    for q, top in maxes.items():
        expected = top - 1 if q == short else 0
        assert value(s, "pymq_consumer_lag_messages", group=GROUP, topic="orders", queue=str(q)) == expected
    assert maxes[short] - 1 >= 1
    assert value(s, "pymq_connections") >= 1
    assert value(s, "pymq_consumer_clients", group=GROUP) == 1
    assert value(s, "pymq_held_pulls") >= 1
    assert value(s, "pymq_uptime_seconds") > 0
    assert value(s, "pymq_topics") >= 1
    assert "process_resident_memory_bytes" in names(text)


async def test_namesrv_metrics_serve_every_series(traffic) -> None:
    """Nameserver series: live brokers, groups, topics, heartbeat ages, connections, requests by result."""
    cluster, _consumer, _ = traffic
    ns = cluster.namesrvs[0]
    async with Producer(cluster.namesrv_addr, "p-missing", send_timeout=1.0) as producer:
        with pytest.raises(Exception):  # noqa: B017 - any error: the route lookup fails on the nameserver
            await producer.send(Message("no-such-topic", b"x"))
    _, s = await scrape(ns.metrics.url)
    assert value(s, "pymq_namesrv_live_brokers") == 1
    assert value(s, "pymq_namesrv_broker_groups") == 1
    assert value(s, "pymq_namesrv_topics") >= 1
    addr = cluster.brokers[0].address
    age = value(
        s,
        "pymq_namesrv_broker_heartbeat_age_seconds",
        cluster="DefaultCluster",
        broker="broker-a",
        broker_id="0",
        address=addr,
    )
    assert 0 <= age < 60
    assert value(s, "pymq_connections") >= 1
    assert value(s, "pymq_requests_total", code="REGISTER_BROKER", result="ok") >= 1
    assert value(s, "pymq_requests_total", code="GET_ROUTEINFO_BY_TOPIC", result="error") >= 1
    assert value(s, "pymq_request_duration_seconds_count", code="REGISTER_BROKER") >= 1


async def test_series_follow_prometheus_naming(traffic) -> None:
    """Counters end in _total (no rate gauges), byte quantities in _bytes, no _created twins, one pymq_ prefix."""
    cluster, _consumer, _ = traffic
    for app in (cluster.brokers[0], cluster.namesrvs[0]):
        text, _samples = await scrape(app.metrics.url)
        families = list(prom_parser.text_string_to_metric_families(text))
        ours = [f for f in families if f.name.startswith("pymq_")]
        assert len(ours) >= 8
        for fam in families:
            assert not any(s.name.endswith("_created") for s in fam.samples), fam.name
            if fam.type == "counter":
                assert all(s.name == fam.name + "_total" for s in fam.samples), fam.name
        for fam in ours:
            assert not re.search(r"tps|per_second|_rate$", fam.name), f"{fam.name}: export a counter, rate() it"
            if "offset" in fam.name:
                assert fam.name.endswith("_bytes"), f"{fam.name}: a byte position says so"
        # everything else is the standard process_*/python_* set
        assert {f.name.split("_")[0] for f in families} <= {"pymq", "process", "python"}
    _, broker = await scrape(cluster.brokers[0].metrics.url)
    assert value(broker, "pymq_put_messages_total", topic="orders") == SENT
    assert {name for name, _ in broker if "tps" in name} == set()


async def test_readme_documents_exactly_the_served_series(traffic) -> None:
    """deploy/README.md names every served pymq_* series, and only series that are served."""
    cluster, _consumer, _ = traffic
    families, served = set(), set()
    for app in (cluster.brokers[0], cluster.namesrvs[0]):
        text, samples = await scrape(app.metrics.url)
        families |= {n for n in names(text) if n.startswith("pymq_")}
        served |= names(text) | {name for name, _ in samples}
    documented = set(re.findall(r"\bpymq_[a-z_]+[a-z]", README.read_text()))
    assert documented - served == set(), "documented but not served"
    assert families - documented == set(), "served but not documented"


def queried_series(exprs: list[str]) -> set[str]:
    """Series names in PromQL expressions (label names and functions are lower case too: keep known prefixes)."""
    return {m for e in exprs for m in re.findall(r"\b(?:pymq|process|python)_[a-z0-9_]*[a-z0-9]", e)}


async def test_dashboard_and_alert_rules_query_served_series(traffic) -> None:
    """Every series the Grafana dashboard and the alert rules query is one the daemons serve."""
    import yaml

    cluster, _consumer, _ = traffic
    served: set[str] = set()
    for app in (cluster.brokers[0], cluster.namesrvs[0]):
        text, samples = await scrape(app.metrics.url)
        # a labelled family with no children yet (no producer connected) is still exported
        served |= names(text) | {name for name, _ in samples}
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "pymq.json").read_text())
    panel_exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "pymq-rules.yml").read_text())
    rule_exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    for what, exprs in (("dashboard", panel_exprs), ("alert rules", rule_exprs)):
        queried = queried_series(exprs)
        assert len(queried) >= 5, what
        assert queried - served == set(), f"the {what} query series no daemon serves"


async def test_http_endpoint_paths_gzip_and_close(tmp_path: Path) -> None:
    """/metrics gzips on request, HEAD and /-/healthy work, other paths 404, close frees the port and hook."""
    from pymq.metrics.requests import RequestMetrics

    async with NamesrvApp(NamesrvConfig(host="127.0.0.1", port=0, metrics_port=0)) as ns:
        m = ns.metrics
        base = f"http://127.0.0.1:{m.port}"
        status, headers, body = await asyncio.to_thread(http_get, base + "/metrics", {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert b"pymq_namesrv_live_brokers" in gzip.decompress(body)
        status, headers, body = await asyncio.to_thread(http_get, base + "/metrics", None, "HEAD")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
        assert (await asyncio.to_thread(http_get, base + "/-/healthy"))[:3:2] == (200, b"OK\n")
        assert (await asyncio.to_thread(http_get, base + "/nope"))[0] == 404
        assert (await asyncio.to_thread(http_get, base + "/metrics", None, "POST"))[0] == 405
        assert any(isinstance(i, RequestMetrics) for i in ns.dispatcher.interceptors)
    assert not any(isinstance(i, RequestMetrics) for i in ns.dispatcher.interceptors)
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # scrapes leave TIME_WAIT behind
        probe.bind(("127.0.0.1", m.port))
        probe.listen()  # nothing listens there any more


async def test_metrics_port_in_use_fails_with_config_error() -> None:
    """A metrics port already taken fails startup with a ConfigError naming the address."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ns = NamesrvApp(NamesrvConfig(host="127.0.0.1", port=0, metrics_port=port))
        try:
            with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
                await ns.start()
        finally:
            await ns.close()


async def test_missing_prometheus_client_fails_with_install_hint(monkeypatch) -> None:
    """Without prometheus-client a configured metrics port fails startup telling how to install it."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now raises ImportError
    ns = NamesrvApp(NamesrvConfig(host="127.0.0.1", port=0, metrics_port=0))
    try:
        with pytest.raises(ConfigError, match=r"pip install 'pymq-rocket\[metrics\]'"):
            await ns.start()
    finally:
        await ns.close()


def test_cli_metrics_port_flag(tmp_path: Path, processes: list[DaemonProcess]) -> None:
    """`pymq-namesrv --metrics-port 0` serves metrics on a free port and logs where."""
    ns = namesrv_process(tmp_path, "--metrics-port", "0").start()
    processes.append(ns)
    event = next(json.loads(line) for line in ns.output().splitlines() if '"metrics_listening"' in line)
    assert event["host"] == "127.0.0.1" and event["port"] > 0
    status, _, body = http_get(event["url"])
    assert status == 200 and b"pymq_namesrv_live_brokers 0.0" in body
    assert ns.stop() == 0


def test_cli_metrics_port_taken_exits_with_config_error(tmp_path: Path) -> None:
    """A daemon whose metrics port is taken exits with code 2 and says why."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ns = namesrv_process(tmp_path, "--metrics-port", str(port))
        with pytest.raises(RuntimeError, match="exited with 2"):
            ns.start()
        ns.stop()
    assert f"cannot serve metrics on 127.0.0.1:{port}" in ns.output()
