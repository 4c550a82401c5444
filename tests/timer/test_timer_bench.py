"""The timer scale benchmark's smoke form: it runs, nothing fires early, a burst is delivered promptly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "timer_bench.py"


def test_timer_bench_smoke_form() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--pending", "2000", "--burst", "1000", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures["pending"]["pending"] == 2000 and figures["pending"]["delivered_early"] == 0
    assert figures["pending"]["filed_per_s"] > 0
    burst = figures["burst"]
    assert burst["early"] is False
    assert 0 <= burst["first_lag_ms"] <= burst["lag_ms"] < 3000  # generous: a loaded 2-core machine
