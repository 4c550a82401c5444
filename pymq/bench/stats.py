"""Counting and summarising a benchmark run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Recorder:
    """Messages, bytes, errors and per-operation latencies (seconds)."""

    body_size: int = 0
    messages: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    finished: float = 0.0

    def ok(self, count: int, latency: float | None = None) -> None:
        self.messages += count
        if latency is not None:
            self.latencies.append(latency)

    def fail(self, count: int = 1) -> None:
        self.errors += count

    def stop(self) -> None:
        self.finished = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    def summary(self, name: str, **extra: Any) -> dict[str, Any]:
        secs = self.elapsed
        lat = sorted(self.latencies)

        def pct(p: float) -> float | None:
            if not lat:
                return None
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 3)

        return {
            "workload": name,
            "messages": self.messages,
            "seconds": round(secs, 3),
            "msgs_per_sec": round(self.messages / secs, 1) if secs else 0.0,
            "mb_per_sec": round(self.messages * self.body_size / secs / 1e6, 2) if secs else 0.0,
            "latency_ms_p50": pct(0.50),
            "latency_ms_p95": pct(0.95),
            "latency_ms_p99": pct(0.99),
            "latency_ms_max": round(lat[-1] * 1000, 3) if lat else None,
            "errors": self.errors,
            **extra,
        }
