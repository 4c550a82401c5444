"""pymq-bench runs on its own (--embedded) and its counts match the broker's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def bench(*args: str) -> list[dict] | dict:
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.bench", *args, "--embedded", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_bench_producer_counts_match() -> None:
    """The producer benchmark reports exactly what the broker stored, with latency percentiles."""
    r = bench("producer", "--count", "3000", "--batch-size", "16", "--concurrency", "2")
    assert r["messages"] == 3000 and r["broker_stored"] == 3000 and r["counts_match"] is True
    assert r["errors"] == 0 and r["msgs_per_sec"] > 0 and r["latency_ms_p99"] is not None


def test_bench_consumer_drains_what_was_produced() -> None:
    """The consumer benchmark consumes every pre-produced message, as the broker's committed offsets confirm."""
    r = bench("consumer", "--count", "3000")
    assert r["messages"] == 3000 and r["errors"] == 0
    assert r["broker_backlog"] == 3000 and r["broker_committed"] == 3000 and r["lag_after"] == 0
    assert r["counts_match"] is True


def test_bench_e2e_reports_latency() -> None:
    """The end-to-end benchmark consumes what it produced at the target rate and reports latency."""
    produced, consumed = bench("e2e", "--rate", "500", "--duration", "2")
    assert produced["messages"] > 0 and consumed["messages"] == produced["messages"]
    assert produced["broker_stored"] == produced["messages"] and produced["counts_match"] and consumed["counts_match"]
    assert consumed["latency_ms_p99"] is not None and consumed["latency_ms_p99"] < 1000


def test_bench_with_acl_signs_every_request() -> None:
    """--acl --embedded: the throwaway cluster enforces ACL and the benchmark's clients sign (counts still match)."""
    r = bench("producer", "--count", "500", "--batch-size", "8", "--acl")
    assert r["messages"] == 500 and r["broker_stored"] == 500 and r["counts_match"] is True and r["errors"] == 0
    r = bench("consumer", "--count", "300", "--acl")
    assert r["messages"] == 300 and r["counts_match"] is True


async def test_embedded_acl_cluster_refuses_unsigned_clients() -> None:
    """What --acl measures is real: the embedded cluster refuses a client without its credentials."""
    from pymq.bench.embedded import EmbeddedCluster
    from pymq.client.admin import AdminClient
    from pymq.errors import NoPermissionError

    with EmbeddedCluster(acl=True) as cluster:
        async with AdminClient(cluster.namesrv) as unsigned:
            with pytest.raises(NoPermissionError, match="request not signed"):
                await unsigned.topic_list()
        async with AdminClient(cluster.namesrv, **cluster.client_options) as signed:
            assert isinstance(await signed.topic_list(), list)


def test_bench_transactional_producer_counts_the_committed_messages() -> None:
    """--mode transaction: every send is a half message plus a commit; the topic gets exactly that many."""
    r = bench("producer", "--count", "300", "--mode", "transaction", "--concurrency", "2")
    assert r["workload"] == "produce-transaction" and r["messages"] == 300 and r["errors"] == 0
    assert r["broker_stored"] == 300 and r["counts_match"] is True


def test_bench_embedded_tls_and_acl() -> None:
    """--embedded --tls --acl: the throwaway cluster is TLS-only with ACL; the benchmark's clients follow."""
    r = bench("producer", "--count", "300", "--batch-size", "4", "--acl", "--tls")
    assert r["messages"] == 300 and r["broker_stored"] == 300 and r["counts_match"] is True and r["errors"] == 0


async def test_embedded_tls_cluster_refuses_plaintext() -> None:
    from pymq.bench.embedded import EmbeddedCluster
    from pymq.client.admin import AdminClient
    from pymq.errors import TransportError

    with EmbeddedCluster(tls=True) as cluster:
        async with AdminClient(cluster.namesrv, timeout=5) as plaintext:
            with pytest.raises(TransportError):
                await plaintext.topic_list()
        async with AdminClient(cluster.namesrv, **cluster.client_options) as tls:
            assert isinstance(await tls.topic_list(), list)


def test_store_settings_reach_the_embedded_broker() -> None:
    """--store-set (EmbeddedCluster's store_settings) configures the throwaway broker; a bad one fails first."""
    import asyncio

    from pymq.bench.embedded import EmbeddedCluster
    from pymq.client.namesrv import NamesrvClient, parse_addrs
    from pymq.protocol.codes import RequestCode
    from pymq.protocol.command import Command
    from pymq.protocol.headers import decode_body
    from pymq.transport.client import RpcClient

    async def store_config(namesrv: str) -> dict:
        async with RpcClient() as rpc:
            info = await NamesrvClient(rpc, parse_addrs(namesrv)).cluster_info()
            (bd,) = info["brokerAddrTable"].values()
            addr = bd["brokerAddrs"].get(0) or bd["brokerAddrs"]["0"]
            resp = await rpc.invoke_ok(addr, Command.request(RequestCode.GET_BROKER_CONFIG, {}))
            return dict(decode_body(resp.body)["store"])

    with EmbeddedCluster("SYNC_FLUSH", store_settings={"sync_flush_write_ahead": "false"}) as cluster:
        store = asyncio.run(store_config(cluster.namesrv))
    assert store["sync_flush_write_ahead"] is False and store["flush_disk_type"] == "SYNC_FLUSH"
    r = bench("producer", "--count", "200", "--flush", "SYNC_FLUSH", "--store-set", "sync_flush_linger_us=0")
    assert r["messages"] == 200 and r["counts_match"] is True
    bad = subprocess.run(
        [sys.executable, "-m", "pymq.cli.bench", "producer", "--embedded", "--count", "10", "--store-set", "no_such=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "no_such" in bad.stderr
