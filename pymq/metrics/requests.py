"""Request counts and latencies: an ``after`` interceptor on the daemon's dispatcher."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Histogram

from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command
from pymq.transport.channel import Channel
from pymq.transport.interceptor import Interceptor

#: seconds; PULL_MESSAGE includes the long-polling hold (up to 15 s by default)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


class RequestMetrics(Interceptor):
    """Per answered request: one dict lookup, one inc, one observe."""

    def __init__(self, registry: Any, codes: Iterable[int] = ()) -> None:
        self.requests = Counter(
            "pymq_requests",
            "Requests handled, by request code and result (ok or error).",
            ["code", "result"],
            registry=registry,
        )
        self.latency = Histogram(
            "pymq_request_duration_seconds",
            "Time from receiving a request to answering it, by request code.",
            ["code"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[int, int], tuple[Any, Any]] = {}
        self.attached(codes)

    def attached(self, codes: Iterable[int]) -> None:
        # Known codes start at zero so error ratios and alerts have series before the first error.
        for code in codes:
            for result in ("ok", "error"):
                self.requests.labels(code_name(code), result)

    def after(self, request: Command, channel: Channel, response: Command | None, seconds: float) -> None:
        self.observe(request.code, int(response is None or response.code == 0), seconds)

    def observe(self, code: int, ok: int, seconds: float) -> None:
        try:
            counter, hist = self._children[code, ok]
        except KeyError:
            counter, hist = self._add(code, ok)
        counter.inc()
        hist.observe(seconds)

    def _add(self, code: int, ok: int) -> tuple[Any, Any]:
        name = code_name(code)
        pair = (self.requests.labels(name, "ok" if ok else "error"), self.latency.labels(name))
        self._children[code, ok] = pair
        return pair
