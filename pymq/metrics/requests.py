"""Request counts and latencies: an ``after`` interceptor on the daemon's dispatcher.

Every answered request passes here, so the hot path only adds to plain counters (one dict
lookup, three additions and a C ``bisect`` per request); the Prometheus families are made
from them when the registry is scraped (on the loop thread too, see
:mod:`pymq.metrics.server`). prometheus_client's own ``Counter.inc`` and
``Histogram.observe`` cost about eight Python calls and three lock round trips per request.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.transport.channel import Channel
from pymq.transport.interceptor import Interceptor

#: seconds; PULL_MESSAGE includes the long-polling hold (up to 15 s by default)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# A code's row: [ok count, error count, latency sum, one count per bucket (not cumulative), +Inf's]
_SUM = 2
_FIRST_BUCKET = 3


def code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


class RequestMetrics(Interceptor):
    """``pymq_requests_total{code,result}`` and ``pymq_request_duration_seconds{code}``, counted per answer."""

    def __init__(self, registry: Any, codes: Iterable[int] = ()) -> None:
        self._rows: dict[int, list[Any]] = {}
        #: codes whose counters are shown (at zero) before their first request
        self._known: set[int] = set()
        self._labels = [floatToGoString(b) for b in LATENCY_BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]
        self.attached(codes)
        registry.register(self)

    def attached(self, codes: Iterable[int]) -> None:
        # Known codes start at zero so error ratios and alerts have series before the first error.
        self._known.update(codes)

    def after(self, request: Command, channel: Channel, response: Command | None, seconds: float) -> None:
        row = self._rows.get(request.code)
        if row is None:
            row = self._row(request.code)
        row[0 if response is None or response.code == 0 else 1] += 1
        row[_SUM] += seconds
        row[_FIRST_BUCKET + bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def observe(self, code: int, ok: int, seconds: float) -> None:
        """Count one answer of request ``code`` (``ok``: 1, or 0 for an error) that took ``seconds``."""
        row = self._rows.get(code)
        if row is None:
            row = self._row(code)
        row[0 if ok else 1] += 1
        row[_SUM] += seconds
        row[_FIRST_BUCKET + bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def _row(self, code: int) -> list[Any]:
        row: list[Any] = [0, 0, 0.0] + [0] * (len(LATENCY_BUCKETS) + 1)
        self._rows[code] = row
        return row

    # --- the registry's side (scrapes) -------------------------------------------------------------

    def describe(self) -> list[Any]:
        return [
            CounterMetricFamily("pymq_requests", "", labels=["code", "result"]),
            HistogramMetricFamily("pymq_request_duration_seconds", "", labels=["code"]),
        ]

    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily(
            "pymq_requests", "Requests handled, by request code and result (ok or error).", labels=["code", "result"]
        )
        latency = HistogramMetricFamily(
            "pymq_request_duration_seconds",
            "Time from receiving a request to answering it, by request code.",
            labels=["code"],
        )
        rows = self._rows
        for code in sorted(self._known | rows.keys()):
            name = code_name(code)
            row = rows.get(code)
            requests.add_metric([name, "ok"], row[0] if row else 0)
            requests.add_metric([name, "error"], row[1] if row else 0)
            if row is None:
                continue  # (a latency series appears with a code's first answer)
            cumulative = 0
            buckets = []
            for label, n in zip(self._labels, row[_FIRST_BUCKET:], strict=True):
                cumulative += n
                buckets.append((label, cumulative))
            latency.add_metric([name], buckets, sum_value=row[_SUM])
        yield requests
        yield latency
