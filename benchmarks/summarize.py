"""One table from a ``benchmarks/run_all.sh`` output directory: the issue-19 figures as same-run ratios.

Reads the JSON files run_all.sh leaves (pymq's runs, and the peers' summaries taken right
before and after them: their two medians are averaged) and prints a markdown table: pymq,
Redis Streams, the bare-asyncio ceiling, the ratios and the peers' steal; then the scale
rows (10,000 queues, restarts, cold backlog). A missing or failed run shows as "—".

    python benchmarks/summarize.py /tmp/pymq-bench-all
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def load(out: Path, name: str) -> dict[str, Any] | None:
    try:
        text = (out / f"{name}.json").read_text()
        # The peers' driver prints its servers' "started" lines before its JSON.
        start = text.find("{")
        return json.loads(text[start:]) if start >= 0 else None
    except (OSError, ValueError):
        return None


def peer(out: Path, who: str, workload: str, key: str = "msgs_per_s") -> float | None:
    """The peer's median for ``workload``, averaged over the before and after rounds."""
    vals = []
    for side in ("before", "after"):
        summary = load(out, f"peers-{side}") or {}
        cell = summary.get(who, {}).get(workload, {}).get(key)
        if isinstance(cell, dict) and cell.get("median") is not None:
            vals.append(float(cell["median"]))
    return sum(vals) / len(vals) if vals else None


def rate(out: Path, name: str) -> float | None:
    d = load(out, name)
    v = d.get("msgs_per_sec") if d else None
    return float(v) if v else None


def fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "—"


def steal(out: Path, workload: str) -> str:
    vals = [peer(out, who, workload, "steal_cores") for who in ("redis", "ceiling")]
    got = [v for v in vals if v is not None]
    return f"{max(got):.2f}" if got else "—"


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pymq-bench-all")
    rows = []
    for label, name, workload in (
        ("W1 batches of 64", "prod-batch", "W1"),
        ("W2 single awaited sends", "prod-single", "W2"),
        ("W3 consume + commit", "consume", "W3"),
        ("W4 8 producers, single sends", "prod-conc8", "W4"),
    ):
        ours, redis, ceiling = rate(out, name), peer(out, "redis", workload), peer(out, "ceiling", workload)
        extra = ""
        if workload == "W2":
            d = load(out, name) or {}
            p99 = d.get("latency_ms_p99")
            extra = f", p99 {p99 * 1000:.0f} µs" if p99 else ""
        rows.append(
            (
                label,
                fmt(ours) + extra,
                fmt(redis),
                fmt(ceiling),
                ratio(ours, ceiling),
                ratio(ours, redis),
                steal(out, workload),
            )
        )
    sync, async_ = rate(out, "prod-conc8-sync"), rate(out, "prod-conc8-async")
    rows.append(("SYNC_FLUSH / ASYNC, 8 producers single", f"{fmt(sync)} / {fmt(async_)}", "", "", "", "", ""))
    sync10, async10 = rate(out, "prod-conc8-sync-10s"), rate(out, "prod-conc8-async-10s")
    cell = ((load(out, "redis-always") or {}).get("redis", {}).get("W4", {}) or {}).get("msgs_per_s")
    always = float(cell["median"]) if isinstance(cell, dict) and cell.get("median") else None
    rows.append(
        (
            "SYNC_FLUSH / ASYNC, 8 producers, 10 s (Redis: appendfsync always)",
            f"{fmt(sync10)} / {fmt(async10)}",
            fmt(always),
            "",
            "",
            ratio(sync10, always),
            "",
        )
    )
    print("| workload | pymq msgs/s | Redis Streams | ceiling | pymq/ceiling | pymq/Redis | steal (cores) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if sync and async_:
        print(f"\nSYNC_FLUSH / ASYNC_FLUSH at 8 producers: {sync / async_:.2f}")
    if sync10 and async10:
        print(f"SYNC_FLUSH / ASYNC_FLUSH at 8 producers for 10 s: {sync10 / async10:.2f}")
    floor = (load(out, "sync-floor") or {}).get("10")
    if floor and floor.get("async"):
        parts = ", ".join(f"{how} {floor[how] / floor['async']:.2f}" for how in floor if how != "async")
        print(f"The same shape against a bare server (sync_floor_bench.py, async {fmt(floor['async'])}): {parts}")

    print("\n| scale | figure |")
    print("|---|---|")
    for what, figure in scale_rows(out):
        print(f"| {what} | {figure} |")


def scale_rows(out: Path) -> list[tuple[str, str]]:
    s = load(out, "scale") or {}
    q, get = s.get("queues", "?"), s.get
    rows = [
        (
            f"{q} queues over {get('topics', '?')} topics: first touch, msgs/s on the caller",
            fmt(get("first_touch_msgs_per_s")),
        ),
        ("files still being made after the first touches (s, maker thread)", fmt(get("files_made_after_seconds"), 2)),
        (
            f"steady puts over {q} queues (msgs/s), ratio to 8 queues",
            f"{fmt(get('steady_msgs_per_s'))}, {get('ratio_vs_8_queues', '—')}",
        ),
        (f"descriptors open with {q} queues (soft limit {get('nofile', '?')})", str(get("open_fds", "—"))),
        (
            f"restart with {q} queue files: clean / crash (s)",
            f"{get('clean_restart_seconds', '—')} / {get('crash_restart_seconds', '—')}",
        ),
        ("consume-queue files mapped at the clean restart", str(get("files_mapped_at_clean_restart", "—"))),
    ]
    for name in ("cold-read", "cold-read-paced"):
        c = load(out, name)
        if c is None:
            rows.append((f"cold backlog ({name})", "—"))
            continue
        pace = f", reader held to {c['pace_mb_s']:.0f} MB/s" if c.get("pace_mb_s") else ""
        rows.append(
            (
                f"cold backlog of {c.get('mb')} MB{pace}: cold/hot MB/s; the loop's own time, hot/cold",
                f"{c.get('cold_vs_hot', '—')}; {c.get('busy_cold_vs_hot', '—')}",
            )
        )
    return rows


if __name__ == "__main__":
    main()
