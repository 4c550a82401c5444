"""Issue 34's table from a ``benchmarks/safe_modes.sh`` output directory: each safe mode's ratio
to its plain counterpart, per round, against the issue's aim.

    python benchmarks/safe_modes_summary.py /tmp/pymq-safe-modes [ROUNDS]

Every ratio compares two runs of the same round (minutes apart, same machine). SYNC_MASTER and
ASYNC_MASTER are shown beside their floor (``repl_floor_bench.py``: a bare uvloop client, master
and slave of the same shape) at the cost pair whose no-slave rate is nearest pymq's no-slave
rate of the round. SYNC_FLUSH is compared with the bare-server floor (``sync_floor_bench.py``)
at the ``--work-us`` whose async rate is nearest pymq's ASYNC_FLUSH rate of the round, as that
script's docstring says to pick it; ACL + TLS batches beside the TLS floor (``tls_floor_bench.py``)
whose plain frame rate is nearest pymq's plain batches a second; the plain path's own figures
are given against the peers of the same round. A missing or failed run shows as "—".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def load(out: Path, name: str) -> Any:
    try:
        text = (out / f"{name}.json").read_text()
        # The peers' driver prints its servers' "started" lines before its JSON.
        start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
        return json.loads(text[start:]) if start >= 0 else None
    except (OSError, ValueError):
        return None


def rate(out: Path, name: str) -> float | None:
    d = load(out, name)
    v = d.get("msgs_per_sec") if isinstance(d, dict) else None
    return float(v) if v else None


def div(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def repl(out: Path, r: int) -> dict[str, dict[str, Any]]:
    rows = load(out, f"repl-{r}") or []
    return {row["mode"]: row for row in rows if isinstance(row, dict) and "mode" in row}


def peer(out: Path, r: int, who: str, workload: str) -> float | None:
    vals = []
    for side in ("before", "after"):
        summary = load(out, f"peers-{side}-{r}") or {}
        cell = summary.get(who, {}).get(workload, {}).get("msgs_per_s")
        if isinstance(cell, dict) and cell.get("median") is not None:
            vals.append(float(cell["median"]))
    return sum(vals) / len(vals) if vals else None


def floor_for(out: Path, r: int, async_rate: float | None) -> tuple[str, float | None, float | None]:
    """(work_us, async, syncer) of the floor run whose async rate is nearest ``async_rate``."""
    floor = load(out, f"floor-{r}") or {}
    if not floor or not async_rate:
        return ("—", None, None)
    work, cell = min(floor.items(), key=lambda kv: abs(float(kv[1].get("async", 0)) - async_rate))
    return (work, cell.get("async"), cell.get("syncer"))


def repl_floor_for(out: Path, r: int, none_rate: float | None, name: str = "repl-floor") -> dict[str, Any]:
    """The ``repl_floor_bench.py`` row (of run ``name``) whose no-slave rate is nearest pymq's of the round."""
    rows = [row for row in load(out, f"{name}-{r}") or [] if isinstance(row, dict) and "none" in row]
    if not rows or not none_rate:
        return {}
    return min(rows, key=lambda row: abs(float(row["none"].get("msgs_per_s", 0)) - none_rate))


def ratios(out: Path, r: int) -> list[tuple[str, float | None, str, float]]:
    """(what, ratio, the two figures, aim) for round ``r``."""
    rows: list[tuple[str, float | None, str, float]] = []
    modes = repl(out, r)
    none = modes.get("none", {})
    floor = repl_floor_for(out, r, none.get("msgs_per_s"))
    for mode, key, aim in (("SYNC_MASTER", "sync", 0.6), ("ASYNC_MASTER", "async", 0.8)):
        m = modes.get(mode, {})
        figures = f"{m.get('msgs_per_s', '—')} vs {none.get('msgs_per_s', '—')} msgs/s"
        rows.append((f"{mode}, 8 producers / no slave", div(m.get("msgs_per_s"), none.get("msgs_per_s")), figures, aim))
        # The bare-server floor of the same shape (repl_floor_bench.py) whose no-slave rate is nearest pymq's.
        f_mode, f_none = floor.get(key, {}), floor.get("none", {})
        figures = (
            f"{fmt(f_mode.get('msgs_per_s'))} vs {fmt(f_none.get('msgs_per_s'))} msgs/s; "
            f"--work-us {fmt(floor.get('work_us'))} --server-work-us {fmt(floor.get('server_work_us'))}; "
            f"by CPU {fmt(floor.get(f'{key}_cpu_vs_none'), 2)}"
        )
        rows.append((f"({mode} floor: bare servers, same shape)", floor.get(f"{key}_vs_none"), figures, 0.0))
    # SYNC's floor with pymq's slave cost given (the bare slave spinning per message): what the shape
    # allows at that slave cost with the client and the master bare.
    slave_floor = repl_floor_for(out, r, none.get("msgs_per_s"), "repl-floor-slave")
    if slave_floor:
        f_sync, f_none = slave_floor.get("sync", {}), slave_floor.get("none", {})
        figures = (
            f"{fmt(f_sync.get('msgs_per_s'))} vs {fmt(f_none.get('msgs_per_s'))} msgs/s; slave CPU "
            f"{fmt(f_sync.get('slave_cpu_us_per_msg'))} µs/msg (pymq's "
            f"{fmt(modes.get('SYNC_MASTER', {}).get('slave_cpu_us_per_msg'))}); --work-us "
            f"{fmt(slave_floor.get('work_us'))} --server-work-us {fmt(slave_floor.get('server_work_us'))} "
            f"--slave-work-us {fmt(slave_floor.get('slave_work_us'))}"
        )
        rows.append(("(SYNC_MASTER floor at pymq's slave cost)", slave_floor.get("sync_vs_none"), figures, 0.0))
    m = modes.get("SYNC_MASTER", {})
    cpu = div(m.get("master_cpu_us_per_msg"), none.get("master_cpu_us_per_msg"))
    figures = f"{m.get('master_cpu_us_per_msg', '—')} vs {none.get('master_cpu_us_per_msg', '—')} µs/msg"
    # (an aim of at most 1.5x: shown as no-slave / SYNC so that, like the others, higher is better)
    rows.append(("SYNC_MASTER master CPU per msg: no slave / SYNC", 1 / cpu if cpu else None, figures, 1 / 1.5))
    pop = load(out, f"pop-{r}") or {}
    push = pop.get("push")
    for key, label, aim in (
        ("pop_ack", "pop + ack each / push", 0.3),
        ("pop_ack_gather", "(pop + ack each, a batch's acks awaited together / push)", 0.0),
        ("pop_ack_many", "pop + ack_many / push", 0.5),
    ):
        rows.append((label, div(pop.get(key), push), f"{fmt(pop.get(key))} vs {fmt(push)} msgs/s", aim))
        if key == "pop_ack":
            # its floor: an ack awaited per message is at least one round trip per message
            trip = (load(out, f"pop-floor-{r}") or {}).get("1", {}).get("requests_per_s")
            rows.append(
                (
                    "(one empty request a round trip, one in flight: pop + ack each's floor / push)",
                    div(trip, push),
                    f"{fmt(trip)} requests/s vs {fmt(push)} msgs/s (pop_floor_bench.py 1)",
                    0.0,
                )
            )
    # the floor of pop's shape: a push consumer taking at most 32 a request, as a pop does
    push32 = pop.get("push32")
    rows.append(
        ("(push, 32 a pull: pop's shape / push)", div(push32, push), f"{fmt(push32)} vs {fmt(push)} msgs/s", 0.0)
    )
    rows.append(
        ("(pop + ack_many / push, 32 a pull)", div(pop.get("pop_ack_many"), push32), f"vs {fmt(push32)} msgs/s", 0.0)
    )
    for safe, plain, label, aim in (
        ("single-acl-tls", "single", "ACL + TLS single sends / plain", 0.8),
        ("single-acl", "single", "(ACL alone, single sends / plain)", 0.0),
        ("single-tls", "single", "(TLS alone, single sends / plain)", 0.0),
        ("batch-acl-tls", "batch", "ACL + TLS batches of 64 / plain", 0.75),
        ("batch-acl", "batch", "(ACL alone, batches / plain)", 0.0),
        ("batch-tls", "batch", "(TLS alone, batches / plain)", 0.0),
    ):
        a, b = rate(out, f"{safe}-{r}"), rate(out, f"{plain}-{r}")
        rows.append((label, div(a, b), f"{fmt(a)} vs {fmt(b)} msgs/s", aim))
    # Two alternating pairs of runs (sync, txn, sync, txn): the ratio of their sums.
    txns = [rate(out, f"{name}-{r}") for name in ("txn", "txn-b")]
    syncs = [rate(out, f"{name}-{r}") for name in ("sync", "sync-b")]
    txn, sync = sum(v for v in txns if v) or None, sum(v for v in syncs if v) or None
    figures = " + ".join(fmt(v) for v in txns) + " vs " + " + ".join(fmt(v) for v in syncs) + " msgs/s"
    rows.append(("transactional / plain sync sends", div(txn, sync), figures, 0.7))
    floor = load(out, f"txn-floor-{r}") or {}
    plain_rate = floor.get("plain")
    for key, label in (
        ("transaction", "(the same, in one cluster, interleaved: txn_floor_bench.py)"),
        ("send+oneway2", "(send + a oneway batch of two: the protocol's shape, no transaction work)"),
    ):
        rows.append((label, div(floor.get(key), plain_rate), f"{fmt(floor.get(key))} vs {fmt(plain_rate)} msgs/s", 0.0))
    # The TLS floors (tls_floor_bench.py: bare uvloop, one frame a round trip) at the client/server
    # cost whose plain frame rate is nearest pymq's plain rate: batches (a frame of 64 messages) and
    # single sends.
    for name, pymq_rate, what in (
        ("tls-floor", div(rate(out, f"batch-{r}"), 64.0), "batches"),
        ("tls-floor-single", rate(out, f"single-{r}"), "single sends"),
    ):
        tls_rows = [row for row in load(out, f"{name}-{r}") or [] if isinstance(row, dict)]
        if not tls_rows or not pymq_rate:
            continue
        t = min(tls_rows, key=lambda row: abs(float(row.get("plain_frames_per_s", 0)) - pymq_rate))
        rows.append(
            (
                f"(TLS floor of {what}: bare uvloop, same frames, tls / plain)",
                t.get("tls_vs_plain"),
                f"{fmt(t.get('tls_frames_per_s'))} vs {fmt(t.get('plain_frames_per_s'))} frames/s "
                f"(pymq {fmt(pymq_rate)} {what}/s); --work-us {fmt(t.get('work_us'))} "
                f"--server-work-us {fmt(t.get('server_work_us'))}",
                0.0,
            )
        )
    sync, async_ = rate(out, f"flush-sync-{r}"), rate(out, f"flush-async-{r}")
    work, f_async, f_sync = floor_for(out, r, async_)
    rows.append(
        (
            f"SYNC_FLUSH / floor (syncer, --work-us {work}), 8 producers 10 s",
            div(sync, f_sync),
            f"{fmt(sync)} vs {fmt(f_sync)} msgs/s (ASYNC {fmt(async_)}, floor async {fmt(f_async)})",
            0.9,
        )
    )
    spark = load(out, f"spark-{r}") or {}
    rows.append(
        (
            "Spark source / zero-work source",
            spark.get("source_vs_ceiling"),
            f"{fmt(spark.get('source_rows_per_sec'))} vs {fmt(spark.get('ceiling_rows_per_sec'))} rows/s; "
            f"decode floor {fmt(spark.get('decode_floor_rows_per_sec'))} = {spark.get('decode_floor_vs_ceiling', '—')}",
            0.85,
        )
    )
    return rows


def fmt(v: Any, digits: int = 0) -> str:
    return "—" if v is None else f"{float(v):,.{digits}f}"


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pymq-safe-modes")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    per_round = [ratios(out, r) for r in range(1, rounds + 1)]
    heads = " | ".join(f"round {r}" for r in range(1, rounds + 1))
    print(f"| safe mode / plain path | aim | {heads} | met in every round |")
    print("|---|---|" + "---|" * rounds + "---|")
    for i, (label, _, _, aim) in enumerate(per_round[0]):
        cells = []
        met = aim > 0
        for rows in per_round:
            value, figures = rows[i][1], rows[i][2]
            cells.append(f"**{value:.2f}** ({figures})" if value is not None else "—")
            met = met and value is not None and value >= aim
        aim_cell = f"≥ {aim:.2f}" if aim else ""
        print(f"| {label} | {aim_cell} | " + " | ".join(cells) + f" | {'yes' if met else ('' if not aim else 'no')} |")
    print("\nThe plain path against the peers of the same round (pymq / Redis Streams, pymq / ceiling):\n")
    print("| workload | " + heads + " |")
    print("|---|" + "---|" * rounds)
    for label, name, workload in (("W1 batches of 64", "batch", "W1"), ("W2 single awaited sends", "single", "W2")):
        cells = []
        for r in range(1, rounds + 1):
            ours, redis, ceiling = (
                rate(out, f"{name}-{r}"),
                peer(out, r, "redis", workload),
                peer(out, r, "ceiling", workload),
            )
            redis_ratio, ceiling_ratio = div(ours, redis), div(ours, ceiling)
            cells.append(f"{fmt(ours)} msgs/s; / Redis {fmt(redis_ratio, 2)}, / ceiling {fmt(ceiling_ratio, 2)}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
