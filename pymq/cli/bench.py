"""``pymq-bench``: measure producing, consuming and end-to-end latency.

Counts are checked against the broker: the topic's max offsets must grow by exactly the
number of messages the benchmark saw acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import click

from pymq.bench.embedded import EmbeddedCluster
from pymq.bench.progress import live
from pymq.bench.stats import Recorder
from pymq.bench.workloads import (
    CLIENT_OPTIONS,
    ProducerSpec,
    ensure_topic,
    group_backlog,
    run_consumer,
    run_producers,
    topic_max_offsets,
    wait_stored,
)
from pymq.cli.common import fail, version_option
from pymq.cli.security_options import security_options
from pymq.errors import PymqError
from pymq.logs import configure_logging
from pymq.transport.loop import run

COLUMNS = [
    ("workload", "workload"),
    ("messages", "messages"),
    ("msgs_per_sec", "msgs/s"),
    ("mb_per_sec", "MB/s"),
    ("latency_ms_p50", "p50 ms"),
    ("latency_ms_p95", "p95 ms"),
    ("latency_ms_p99", "p99 ms"),
    ("latency_ms_max", "max ms"),
    ("errors", "errors"),
]


#: --acl given (read by cluster_addr; click stores it here, as the security options go to CLIENT_OPTIONS)
_ACL: dict[str, bool] = {}
#: --store-set KEY=VALUE given: store settings of the embedded broker (read by cluster_addr)
_STORE_SETTINGS: dict[str, str] = {}


def _store_settings(_ctx: Any, _param: Any, values: tuple[str, ...]) -> None:
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE (a [store] setting)")
        _STORE_SETTINGS[key.strip()] = value.strip()


@contextlib.contextmanager
def cluster_addr(namesrv: str | None, embedded: bool, flush: str = "ASYNC_FLUSH") -> Iterator[str]:
    if embedded:
        with EmbeddedCluster(
            flush, acl=_ACL.get("acl", False), tls=bool(CLIENT_OPTIONS.get("tls")), store_settings=_STORE_SETTINGS
        ) as cluster:
            CLIENT_OPTIONS.update(cluster.client_options)
            yield cluster.namesrv
    else:
        if _ACL.get("acl") and not (CLIENT_OPTIONS.get("access_key") or os.environ.get("PYMQ_ACCESS_KEY")):
            raise PymqError("--acl against a running cluster needs --access-key/--secret-key (or PYMQ_ACCESS_KEY)")
        yield namesrv or os.environ.get("PYMQ_NAMESRV", "127.0.0.1:9876")


def print_summary(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
        return
    table = [
        [
            ("-" if r.get(k) is None else f"{r[k]:,}" if isinstance(r[k], (int, float)) else str(r[k]))
            for k, _ in COLUMNS
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, (_, h) in enumerate(COLUMNS)]
    click.echo("  ".join(h.rjust(w) for (_, h), w in zip(COLUMNS, widths, strict=True)))
    for row in table:
        click.echo("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    for r in rows:
        extra = {k: v for k, v in r.items() if k not in dict(COLUMNS) and k != "seconds"}
        if extra:
            click.echo("  " + ", ".join(f"{k}={v}" for k, v in extra.items()))


def common(f: Any) -> Any:
    f = click.option("--namesrv", default=None, help="Nameserver address (default $PYMQ_NAMESRV or 127.0.0.1:9876).")(f)
    f = click.option("--embedded", is_flag=True, help="Start a throwaway nameserver+broker (in a child process).")(f)
    f = click.option("--topic", default="BenchTopic", show_default=True)(f)
    f = click.option("--body-size", default=1024, show_default=True, help="Bytes per message.")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")(f)
    f = click.option("--quiet", is_flag=True, help="No live progress.")(f)
    f = click.option(
        "--acl",
        is_flag=True,
        expose_value=False,
        callback=lambda _c, _p, v: _ACL.__setitem__("acl", v),
        help="Signed requests: with --embedded the throwaway cluster enforces ACL (measures its cost; "
        "--embedded --tls likewise runs it TLS-only with a throwaway CA).",
    )(f)
    f = click.option(
        "--store-set",
        multiple=True,
        metavar="KEY=VALUE",
        expose_value=False,
        callback=_store_settings,
        help="With --embedded: a [store] setting of the throwaway broker, e.g. sync_flush_write_ahead=false "
        "(repeatable; A/B runs of one build).",
    )(f)
    f = security_options(CLIENT_OPTIONS)(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
def main() -> None:
    """Benchmark a pymq cluster.

    \b
    Examples:
      pymq-bench producer --embedded --count 100000 --batch-size 64
      pymq-bench consumer --namesrv 127.0.0.1:9876 --topic BenchTopic --group bench
      pymq-bench e2e --embedded --rate 20000 --duration 10
    """
    configure_logging("error")


def _producer_spec(namesrv: str, **kw: Any) -> ProducerSpec:
    if kw["count"] is None and kw["duration"] is None:
        kw["count"] = 100_000
    return ProducerSpec(namesrv=namesrv, **kw)


async def _produce(spec: ProducerSpec, quiet: bool) -> dict[str, Any]:
    await ensure_topic(spec.namesrv, spec.topic)
    before = await topic_max_offsets(spec.namesrv, spec.topic)
    recs = [Recorder(spec.body_size) for _ in range(spec.concurrency)]
    async with live(lambda: recs, f"produce ({spec.mode}, batch {spec.batch_size}, x{spec.concurrency})", not quiet):
        await run_producers(spec, recs)
    total = Recorder(spec.body_size, sum(r.messages for r in recs), sum(r.errors for r in recs))
    total.latencies = [x for r in recs for x in r.latencies]
    total.started = min(r.started for r in recs)
    total.finished = max(r.finished for r in recs)
    if spec.mode == "transaction":  # the commits are oneway: count once they have landed
        stored = await wait_stored(spec.namesrv, spec.topic, before, total.messages)
    else:
        stored = await topic_max_offsets(spec.namesrv, spec.topic) - before
    exact = stored == total.messages if spec.mode != "oneway" else None
    return total.summary(
        f"produce-{spec.mode}",
        batch=spec.batch_size,
        concurrency=spec.concurrency,
        broker_stored=stored,
        counts_match=exact,
    )


@main.command()
@common
@click.option("--batch-size", default=1, show_default=True, help="Messages per request (send_batch when > 1).")
@click.option("--concurrency", default=1, show_default=True, help="Concurrent producers, each with its own connection.")
@click.option("--count", type=int, default=None, help="Messages to send (default 100000 unless --duration).")
@click.option("--duration", type=float, default=None, help="Seconds to send for.")
@click.option(
    "--mode",
    type=click.Choice(["sync", "async", "oneway", "transaction"]),
    default="sync",
    show_default=True,
    help="transaction: send_in_transaction with an empty local transaction (half send + oneway commit).",
)
@click.option(
    "--flush",
    type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]),
    default="ASYNC_FLUSH",
    help="Embedded broker flush mode.",
)
def producer(namesrv: str | None, embedded: bool, quiet: bool, as_json: bool, flush: str, **kw: Any) -> None:
    """Send messages as fast as possible; report throughput and per-request latency.

    \b
    Example:
      pymq-bench producer --embedded --count 200000 --batch-size 64
      pymq-bench producer --embedded --count 20000 --mode transaction
    """
    if kw["mode"] == "transaction" and kw["batch_size"] != 1:
        raise click.UsageError("--mode transaction sends one message per transaction: use --batch-size 1")
    try:
        with cluster_addr(namesrv, embedded, flush) as addr:
            print_summary([run(_produce(_producer_spec(addr, **kw), quiet))], as_json)
    except PymqError as exc:
        fail(str(exc))


@main.command()
@common
@click.option("--group", default="bench-consumer", show_default=True)
@click.option("--duration", type=float, default=None, help="Seconds to consume (default: until drained).")
@click.option(
    "--count",
    type=int,
    default=200_000,
    show_default=True,
    help="With --embedded: messages to produce first.",
)
@click.option("--batch-size", default=32, show_default=True, help="Messages per listener call.")
@click.option("--orderly", is_flag=True, help="Orderly listener (queue locks, one task per queue).")
@click.option("--fail-first", is_flag=True, help="Fail every first delivery: measures the send-back (retry) path.")
@click.option("--queues", default=8, show_default=True, help="Queues of the topic if it has to be created.")
def consumer(
    namesrv: str | None, embedded: bool, quiet: bool, as_json: bool, topic: str, body_size: int,
    group: str, duration: float | None, count: int, batch_size: int, orderly: bool, fail_first: bool, queues: int,
) -> None:  # fmt: skip
    """Consume a topic with a push consumer (offsets committed); report msgs/s.

    With --embedded, COUNT messages are produced first (not timed), then consumed. With
    --fail-first the figure is send-backs per second (each message fails once).

    \b
    Example:
      pymq-bench consumer --embedded --count 200000
      pymq-bench consumer --embedded --count 50000 --orderly --batch-size 1
    """

    async def go(addr: str) -> dict[str, Any]:
        await ensure_topic(addr, topic, queues)
        if embedded:
            prod = ProducerSpec(addr, topic, body_size, batch_size=64, count=count)
            await run_producers(prod, [Recorder(body_size)])
        # What the group has left to consume, by the broker's offsets: the run drains exactly
        # that (unless --duration), and the committed offsets must move by as much.
        backlog, committed_before = await group_backlog(addr, group, topic)
        expect = None if duration else backlog
        rec = Recorder(body_size)
        name = "send-back" if fail_first else "consume-orderly" if orderly else "consume"
        async with live(lambda: [rec], name, not quiet):
            c = await run_consumer(
                addr, topic, group, rec, duration=duration, expect=expect, batch_size=batch_size,
                orderly=orderly, fail_first=fail_first,
            )  # fmt: skip
        await c.close()  # commits the offsets
        lag, committed_after = await group_backlog(addr, group, topic)
        consumed = committed_after - committed_before
        checks: dict[str, Any] = {"broker_backlog": backlog, "broker_committed": consumed, "lag_after": lag}
        if expect is not None:
            checks["counts_match"] = rec.messages == backlog == consumed and lag == 0
        return rec.summary(name, group=group, batch=batch_size, **checks)

    try:
        with cluster_addr(namesrv, embedded) as addr:
            print_summary([run(go(addr))], as_json)
    except PymqError as exc:
        fail(str(exc))


@main.command()
@common
@click.option("--rate", type=float, default=10_000, show_default=True, help="Messages per second to produce.")
@click.option("--duration", type=float, default=10.0, show_default=True)
@click.option("--batch-size", default=1, show_default=True, help="Messages per send request.")
@click.option("--group", default=None, help="Consumer group (default: a fresh one).")
def e2e(
    namesrv: str | None, embedded: bool, quiet: bool, as_json: bool, topic: str, body_size: int,
    rate: float, duration: float, batch_size: int, group: str | None,
) -> None:  # fmt: skip
    """Produce at RATE while consuming; latency is consume time minus send time.

    \b
    Example:
      pymq-bench e2e --embedded --rate 20000 --duration 10
    """
    import asyncio

    async def go(addr: str) -> list[dict[str, Any]]:
        await ensure_topic(addr, topic)
        grp = group or f"bench-e2e-{os.getpid()}"
        crec = Recorder(body_size)
        before = await topic_max_offsets(addr, topic)
        consumer_task = asyncio.ensure_future(
            run_consumer(
                addr, topic, grp, crec, duration=None, expect=None, e2e=True, idle_stop=3.0, since_ns=time.time_ns()
            )
        )
        await asyncio.sleep(2.0)  # joined and parked on long polls
        spec = ProducerSpec(addr, topic, body_size, batch_size=batch_size, duration=duration, rate=rate, mode="sync")
        precs = [Recorder(body_size)]
        async with live(lambda: [*precs, crec], f"e2e at {rate:,.0f} msgs/s", not quiet):
            await run_producers(spec, precs)
            c = await consumer_task
        await c.close()
        stored = await topic_max_offsets(addr, topic) - before
        p = precs[0].summary("e2e-produce", rate=rate, broker_stored=stored, counts_match=stored == precs[0].messages)
        s = crec.summary("e2e-consume", note="latency = send to listener", counts_match=crec.messages == stored)
        s["msgs_per_sec"] = round(crec.messages / max(1e-9, precs[0].elapsed), 1)
        return [p, s]

    try:
        with cluster_addr(namesrv, embedded) as addr:
            print_summary(run(go(addr)), as_json)
    except PymqError as exc:
        fail(str(exc))


if __name__ == "__main__":
    sys.exit(main())
