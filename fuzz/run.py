"""Run the atheris targets, one process each, one after the other; exit 1 on any finding.

    python fuzz/run.py --seconds 5                      # every target, 5 s each (what CI does)
    python fuzz/run.py --minutes 10 --sanitized records # the long form, C accelerator under ASan+UBSan

Each target starts from its committed seed corpus (fuzz/corpus/<target>/, read only) plus a
work corpus (``--work``, default a temporary directory) where libFuzzer writes the new
inputs it finds. ``--sanitized`` builds (fuzz/build_sanitized.py) and loads the accelerator
with AddressSanitizer and UndefinedBehaviorSanitizer, preloading the ASan runtime. A crash,
a divergence or a sanitizer report leaves ``crash-*`` / ``timeout-*`` files in
``--artifacts`` (default fuzz/artifacts/) and fails the run; replay one with
``python fuzz/fuzz_one.py TARGET FILE``. The last lines print each target's executions per
second and the coverage (libFuzzer's cov/ft) it reached; ``--json`` writes them too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import build_sanitized  # noqa: E402

TARGET_NAMES = (
    "frame", "records", "batch", "headers", "signing", "ha_codec", "timer_files", "pop_records", "remoting",
    "grpc_mapping",
)  # fmt: skip

_STAT = re.compile(r"#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+).*?exec/s: (\d+)")


def run_target(
    name: str, seconds: int, work: Path, artifacts: Path, env: dict[str, str], max_len: int, quiet: bool
) -> dict[str, object]:
    corpus = HERE / "corpus" / name
    target_work = work / name
    target_work.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        str(HERE / "fuzz_one.py"),
        name,
        f"-max_total_time={seconds}",
        f"-max_len={max_len}",
        "-timeout=20",
        "-rss_limit_mb=3072",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/{name}-",
        *([f"-dict={HERE / 'dicts' / f'{name}.dict'}"] if (HERE / "dicts" / f"{name}.dict").is_file() else []),
        str(target_work),
        *([str(corpus)] if corpus.is_dir() else []),
    ]
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    wall = time.monotonic() - started
    out = proc.stdout
    stats = _STAT.findall(out)
    runs = re.search(r"stat::number_of_executed_units: (\d+)", out)
    speed = re.search(r"stat::average_exec_per_sec:\s+(\d+)", out)
    result: dict[str, object] = {
        "target": name,
        "returncode": proc.returncode,
        "seconds": round(wall, 1),
        "executions": int(runs.group(1)) if runs else None,
        "exec_per_sec": int(speed.group(1)) if speed else None,
        "cov": int(stats[-1][1]) if stats else None,
        "ft": int(stats[-1][2]) if stats else None,
        "corpus_new": len(list(target_work.iterdir())),
    }
    sanitizer = "ERROR: AddressSanitizer" in out or "runtime error:" in out
    result["sanitizer_report"] = sanitizer
    if proc.returncode != 0 or sanitizer or not stats:
        result["output_tail"] = out[-6000:]
    if not quiet or "output_tail" in result:
        print(out[-6000:] if "output_tail" in result else out[-1500:], flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", help=f"default: all of {', '.join(TARGET_NAMES)}")
    length = ap.add_mutually_exclusive_group()
    length.add_argument("--seconds", type=int)
    length.add_argument("--minutes", type=float)
    ap.add_argument("--sanitized", action="store_true", help="the accelerator built with ASan + UBSan")
    ap.add_argument("--work", type=Path, help="where new inputs go (default: a temporary directory)")
    ap.add_argument("--artifacts", type=Path, default=HERE / "artifacts")
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--json", type=Path, help="write the per-target results here")
    ap.add_argument("--jobs", type=int, default=1, help="targets run at once (default 1: one at a time)")
    ap.add_argument("--quiet", action="store_true", help="print libFuzzer's output only on a failure")
    args = ap.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else int((args.minutes or 0.05) * 60)
    names = args.targets or list(TARGET_NAMES)
    known = (*TARGET_NAMES, "selftest") if os.environ.get("PYMQ_FUZZ_SELFTEST") else TARGET_NAMES
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown targets {unknown}")
    env = dict(os.environ)
    if args.sanitized:
        env.update(build_sanitized.sanitizer_env(build_sanitized.build()))
    results = []
    with tempfile.TemporaryDirectory(prefix="pymq-fuzz-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        work = args.work or Path(tmp)
        runs = [
            pool.submit(run_target, name, seconds, work, args.artifacts, env, args.max_len, args.quiet)
            for name in names
        ]
        for future in runs:
            r = future.result()
            results.append(r)
            print(
                f"{r['target']}: rc={r['returncode']} {r['executions']} execs in {r['seconds']} s "
                f"({r['exec_per_sec']}/s) cov={r['cov']} ft={r['ft']} new={r['corpus_new']}"
                + (" SANITIZER REPORT" if r["sanitizer_report"] else ""),
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"sanitized": args.sanitized, "results": results}, indent=1))
    failed = [r["target"] for r in results if r["returncode"] != 0 or r["sanitizer_report"] or r["cov"] is None]
    if failed:
        print(f"FAILED: {failed}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
