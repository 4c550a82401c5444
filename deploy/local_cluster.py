#!/usr/bin/env python3
"""Run the example cluster of deploy/config on loopback: two nameservers, two broker groups.

    .venv/bin/python deploy/local_cluster.py                       # ports from the TOML files
    .venv/bin/python deploy/local_cluster.py --port-offset 1000    # 10876, 10877, 11911, 11921 ...
    .venv/bin/python deploy/local_cluster.py --ephemeral --status-file run.json   # free ports

Each daemon runs from an effective config written to ``<dir>/conf`` (the TOML file with host
127.0.0.1, the chosen ports, its store under ``<dir>/store`` and small store files unless
``--full-size-files``); logs (JSON lines) go to ``<dir>/logs``. Once everything serves, the
launcher prints where it listens and waits; Ctrl-C or SIGTERM stops the brokers, then the
nameservers, by PID. If a daemon dies, the launcher stops the others and exits with 1.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymq.config import SMALL_STORE_SIZES, BrokerConfig, NamesrvConfig, load_config
from pymq.errors import ConfigError

HOST = "127.0.0.1"
HERE = Path(__file__).resolve().parent


@dataclass
class Daemon:
    name: str
    kind: str  # "namesrv" or "broker"
    source: Path
    config: dict[str, Any]
    conf_path: Path = Path()
    port_file: Path = Path()
    log_path: Path = Path()
    proc: subprocess.Popen[bytes] | None = None
    address: str = ""
    metrics_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


# --- effective configs ---


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def dump_toml(data: dict[str, Any]) -> str:
    """TOML for flat settings plus one level of tables (all our config models need)."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for name, table in data.items():
        if isinstance(table, dict):
            lines += ["", f"[{toml_key(name)}]"]
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def shifted(port: int | None, args: argparse.Namespace) -> int | None:
    if port is None:
        return None
    if args.ephemeral:
        return 0
    port += args.port_offset
    if not 0 < port <= 65535:
        raise SystemExit(f"error: port {port} out of range; pick another --port-offset")
    return port


def discover(args: argparse.Namespace) -> list[Daemon]:
    daemons = []
    for path in sorted(args.config_dir.glob("*.toml")):
        kind = (
            "namesrv"
            if path.stem.startswith("namesrv")
            else "broker"
            if path.stem.startswith("broker")
            else ""
        )
        if not kind:
            print(f"skipping {path.name}: not namesrv-*.toml or broker-*.toml", file=sys.stderr)
            continue
        with open(path, "rb") as f:
            daemons.append(Daemon(path.stem, kind, path, tomllib.load(f)))
    kinds = [d.kind for d in daemons]
    if "namesrv" not in kinds or "broker" not in kinds:
        raise SystemExit(f"error: {args.config_dir} needs namesrv-*.toml and broker-*.toml files")
    return sorted(daemons, key=lambda d: d.kind != "namesrv")  # nameservers first


def effective(d: Daemon, args: argparse.Namespace, namesrv_addrs: list[str]) -> dict[str, Any]:
    cfg = dict(d.config)
    cfg["host"] = HOST
    defaults = NamesrvConfig() if d.kind == "namesrv" else BrokerConfig()
    cfg["port"] = shifted(cfg.get("port", defaults.port), args)
    metrics = None if args.no_metrics else shifted(cfg.get("metrics_port"), args)
    cfg.pop("metrics_port", None)
    if metrics is not None:
        cfg["metrics_port"] = metrics
    if d.kind == "broker":
        cfg["advertised_host"] = HOST
        cfg["namesrv_addrs"] = namesrv_addrs
        store = dict(cfg.get("store", {}))
        store["store_dir"] = str(args.dir / "store" / cfg.get("broker_name", d.name))
        if not args.full_size_files:
            store.update(SMALL_STORE_SIZES)
        cfg["store"] = store
        d.extra["store_dir"] = store["store_dir"]
    return cfg


# --- processes ---


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the launcher dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start(d: Daemon, args: argparse.Namespace, namesrv_addrs: list[str]) -> None:
    cfg = effective(d, args, namesrv_addrs)
    d.conf_path = args.dir / "conf" / f"{d.name}.toml"
    d.conf_path.write_text(f"# effective config for {d.name}, from {d.source}\n" + dump_toml(cfg))
    try:  # the same validation the daemon will do, with a clearer message here
        load_config(NamesrvConfig if d.kind == "namesrv" else BrokerConfig, d.conf_path)
    except ConfigError as exc:
        raise SystemExit(f"error: {d.source}: {exc}") from exc
    d.port_file = args.dir / "run" / f"{d.name}.addr"
    d.port_file.unlink(missing_ok=True)
    d.log_path = args.dir / "logs" / f"{d.name}.log"
    cmd = [
        args.python,
        "-m",
        f"pymq.cli.{d.kind}",
        "--config",
        str(d.conf_path),
        "--port-file",
        str(d.port_file),
        "--log-format",
        "json",
    ]
    with open(d.log_path, "ab") as log:
        d.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    deadline = time.monotonic() + args.timeout
    while not (d.port_file.exists() and d.port_file.read_text().strip()):
        if d.proc.poll() is not None:
            raise RuntimeError(
                f"{d.name} exited with code {d.proc.returncode}; log {d.log_path}:\n{d.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{d.name} did not start within {args.timeout:g}s; log {d.log_path}:\n{d.log_tail()}"
            )
        time.sleep(0.05)
    d.address = d.port_file.read_text().strip()
    d.metrics_url = metrics_url(d)


def metrics_url(d: Daemon) -> str | None:
    """The metrics address the daemon logged (the bound port, also when 0 was asked for)."""
    for line in d.log_path.read_text(errors="replace").splitlines():
        if '"metrics_listening"' in line:
            try:
                return json.loads(line).get("url")
            except ValueError:
                continue
    return None


def stop_all(daemons: list[Daemon], timeout: float) -> None:
    """SIGTERM the brokers and wait, then the nameservers; SIGKILL whatever outlives ``timeout``."""
    for kind in ("broker", "namesrv"):
        tier = [d for d in daemons if d.kind == kind and d.running()]
        for d in tier:
            d.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        for d in tier:
            try:
                d.proc.wait(max(0.1, deadline - time.monotonic()))  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                print(f"{d.name} (pid {d.pid}) did not stop in {timeout:g}s: SIGKILL", file=sys.stderr)
                d.proc.kill()  # type: ignore[union-attr]
                d.proc.wait()  # type: ignore[union-attr]
    for d in daemons:
        if d.proc is not None:
            d.port_file.unlink(missing_ok=True)
        if d.proc is not None and d.proc.returncode not in (0, None):
            print(f"{d.name} exited with code {d.proc.returncode}; log {d.log_path}", file=sys.stderr)


# --- output ---


def status(daemons: list[Daemon], args: argparse.Namespace, namesrv: str) -> dict[str, Any]:
    return {
        "dir": str(args.dir),
        "launcher_pid": os.getpid(),
        "namesrv_addr": namesrv,
        "daemons": [
            {
                "name": d.name,
                "kind": d.kind,
                "pid": d.pid,
                "address": d.address,
                "metrics_url": d.metrics_url,
                "config": str(d.conf_path),
                "log": str(d.log_path),
                "store_dir": d.extra.get("store_dir"),
            }
            for d in daemons
        ],
    }


def print_table(info: dict[str, Any]) -> None:
    print(f"pymq example cluster on {HOST} (files under {info['dir']})")
    print(f"  {'NAME':<11} {'PID':>7}  {'LISTEN':<17} {'METRICS':<36} LOG")
    for d in info["daemons"]:
        print(f"  {d['name']:<11} {d['pid']:>7}  {d['address']:<17} {d['metrics_url'] or '-':<36} {d['log']}")
    ns = info["namesrv_addr"]
    print(f"\nnameservers: {ns}")
    print(f"  pymq-admin --namesrv '{ns}' cluster-list")
    print(f"  pymq-admin --namesrv '{ns}' topic-create --topic demo --queues 4")
    print(f"  pymq-bench producer --namesrv '{ns}' --topic demo --count 10000")
    print("Ctrl-C stops everything.", flush=True)


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


# --- main ---


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--config-dir", type=Path, default=HERE / "config", help="namesrv-*.toml and broker-*.toml"
    )
    p.add_argument("--dir", type=Path, help="stores, logs, effective configs (default: a new temp dir, kept)")
    p.add_argument(
        "--port-offset",
        type=int,
        default=int(os.environ.get("PYMQ_LOCAL_PORT_OFFSET", "0")),
        help="add this to every port of the TOML files (env PYMQ_LOCAL_PORT_OFFSET)",
    )
    p.add_argument("--ephemeral", action="store_true", help="free ports chosen by the OS (for tests)")
    p.add_argument(
        "--no-metrics", action="store_true", help="no metrics endpoints (no prometheus-client needed)"
    )
    p.add_argument(
        "--full-size-files", action="store_true", help="keep the TOML store file sizes (1 GiB commitlog)"
    )
    p.add_argument(
        "--status-file", type=Path, help="write addresses and PIDs here as JSON once everything serves"
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for each daemon to start or stop"
    )
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the daemons")
    args = p.parse_args(argv)
    args.dir = (args.dir or Path(tempfile.mkdtemp(prefix="pymq-local-"))).resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sub in ("conf", "logs", "run", "store"):
        (args.dir / sub).mkdir(parents=True, exist_ok=True)
    daemons = discover(args)
    stop = {"signal": 0}

    def on_signal(signum: int, _frame: object) -> None:
        stop["signal"] = signum

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    namesrv_addrs: list[str] = []
    code = 0
    try:
        for d in daemons:
            if stop["signal"]:
                break
            start(d, args, namesrv_addrs)
            if d.kind == "namesrv":
                namesrv_addrs.append(d.address)
        if not stop["signal"]:
            info = status(daemons, args, ";".join(namesrv_addrs))
            print_table(info)
            if args.status_file:
                write_json(args.status_file, info)
        while not stop["signal"]:
            dead = [d for d in daemons if not d.running()]
            if dead:
                d = dead[0]
                print(
                    f"{d.name} (pid {d.pid}) exited with code {d.proc.returncode}: stopping the cluster\n"  # type: ignore[union-attr]
                    f"{d.log_tail()}",
                    file=sys.stderr,
                )
                code = 1
                break
            time.sleep(0.1)
    except (RuntimeError, SystemExit) as exc:
        print(f"error: {exc}" if isinstance(exc, RuntimeError) else exc, file=sys.stderr)
        code = 1 if isinstance(exc, RuntimeError) else exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not abandon the daemons
        stop_all(daemons, args.timeout)
        print(
            "stopped: " + ", ".join(f"{d.name} (pid {d.pid})" for d in daemons if d.proc is not None),
            flush=True,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
