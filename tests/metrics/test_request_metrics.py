"""Request metrics count plain numbers per answer and expose what prometheus_client's own metrics would."""

from __future__ import annotations

import prometheus_client as prom

from pymq.metrics.requests import LATENCY_BUCKETS, RequestMetrics
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command

LATENCIES = [0.0, 0.0001, 0.0005, 0.00050001, 0.001, 0.02, 0.5, 1.0, 29.0, 30.0, 31.0, 1e9]


def samples(registry: prom.CollectorRegistry, prefix: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for m in registry.collect()
        for s in m.samples
        if s.name.startswith(prefix) and not s.name.endswith("_created")
    }


def test_the_exposition_matches_prometheus_clients_own_counter_and_histogram() -> None:
    ours = prom.CollectorRegistry()
    metrics = RequestMetrics(ours, [RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE])
    ref = prom.CollectorRegistry()
    counter = prom.Counter("pymq_requests", "", ["code", "result"], registry=ref)
    hist = prom.Histogram("pymq_request_duration_seconds", "", ["code"], buckets=LATENCY_BUCKETS, registry=ref)
    for code in (RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE):
        for result in ("ok", "error"):
            counter.labels(code.name, result)
    send = Command.request(RequestCode.SEND_MESSAGE)
    for i, seconds in enumerate(LATENCIES):
        code = ResponseCode.SUCCESS if i % 3 else ResponseCode.SYSTEM_ERROR
        metrics.after(send, None, send.response(code), seconds)  # type: ignore[arg-type]
        counter.labels("SEND_MESSAGE", "ok" if code == 0 else "error").inc()
        hist.labels("SEND_MESSAGE").observe(seconds)
    metrics.after(Command.request(4242), None, None, 0.003)  # type: ignore[arg-type]  # a oneway, unknown code
    counter.labels("4242", "ok").inc()
    counter.labels("4242", "error")
    hist.labels("4242").observe(0.003)
    for prefix in ("pymq_requests", "pymq_request_duration_seconds"):
        assert samples(ours, prefix) == samples(ref, prefix)
    assert samples(ours, "pymq_request_duration_seconds_count")[
        ("pymq_request_duration_seconds_count", (("code", "SEND_MESSAGE"),))
    ] == len(LATENCIES)
