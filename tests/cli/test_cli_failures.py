"""Daemons and CLIs as Unix citizens: one-line startup failures with documented exit codes, a clean
stop when stdout is a dead pipe, ``--version`` everywhere, clear errors for bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from pymq import DISTRIBUTION
from pymq.cli.common import EXIT_CONFIG, EXIT_OK, EXIT_STORE_LOCKED
from pymq.testing import DaemonProcess, LocalCluster
from pymq.testing.processes import broker_process, namesrv_process
from tests.helpers import run_admin

pytestmark = pytest.mark.integration


def cli(name: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"pymq.cli.{name}", *args], capture_output=True, text=True, timeout=timeout
    )


def one_line(text: str) -> str:
    assert text.count("\n") == 1 and text.endswith("\n"), text
    assert "Traceback" not in text
    return text


# --- startup failures ------------------------------------------------------------------------------------


PORT_IN_USE = {
    # the daemon, its arguments around the taken port; --log-format json: JSON logs are for a running daemon
    "namesrv": ["--host", "127.0.0.1", "--port", "{port}", "--log-format", "json"],
    "broker": [
        "--host", "127.0.0.1", "--port", "{port}", "--namesrv", "127.0.0.1:1", "--store-dir", "{tmp}/store",
        "--log-format", "json",
    ],
    "local-namesrv": [
        "--namesrv-port", "{port}", "--broker-port", "{free}", "--grpc-port", "0", "--store-dir", "{tmp}/s",
    ],
    "local-broker": [
        "--namesrv-port", "{free}", "--broker-port", "{port}", "--grpc-port", "0", "--store-dir", "{tmp}/s",
    ],
    "local-grpc": ["--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "{port}", "--store-dir", "{tmp}/s"],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PORT_IN_USE))
def test_port_in_use_is_one_plain_line_with_the_same_wording_exit_2(tmp_path: Path, free_ports, case: str) -> None:
    (free,) = free_ports(1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [a.format(port=port, free=free, tmp=tmp_path) for a in PORT_IN_USE[case]]
        out = cli(case.split("-")[0], *args)
    assert out.returncode == EXIT_CONFIG, out.stderr
    assert one_line(out.stderr) == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert out.stdout == ""


def test_store_locked_reads_the_same_in_broker_and_local_exit_3(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    holder = broker_process(tmp_path, "127.0.0.1:1", "broker-a")
    processes.append(holder)
    holder.start()
    store = str(tmp_path / "broker-a")
    broker = cli(
        "broker", "--host", "127.0.0.1", "--port", "0", "--namesrv", "127.0.0.1:1", "--store-dir", store,
        "--small-files", "--log-format", "json",
    )  # fmt: skip
    local = cli("local", "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0", "--store-dir", store)
    assert (broker.returncode, local.returncode) == (EXIT_STORE_LOCKED, EXIT_STORE_LOCKED), (broker, local)
    assert one_line(broker.stderr).startswith("error: ") and "locked" in broker.stderr
    assert one_line(local.stderr) == broker.stderr


def unusable_store_dirs(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    return {
        "under-a-file": a_file / "store",
        "in-sys": Path("/sys/pymq-store"),
        # root writes anywhere it has permission bits for: /proc refuses new files even to root
        "not-writable": read_only if os.geteuid() != 0 else Path("/proc"),
    }


@pytest.mark.parametrize("case", ["under-a-file", "in-sys", "not-writable"])
def test_broker_store_dir_unusable_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    store = unusable_store_dirs(tmp_path)[case]
    out = cli(
        "broker", "--host", "127.0.0.1", "--port", "0", "--namesrv", "127.0.0.1:1", "--store-dir", str(store),
        "--log-format", "console",
    )  # fmt: skip
    assert out.returncode == EXIT_CONFIG, out.stderr
    assert one_line(out.stderr).startswith(f"error: cannot use store directory {store}")


def test_pymq_local_store_dir_under_a_file_is_one_line_exit_2(tmp_path: Path, free_ports) -> None:
    store = unusable_store_dirs(tmp_path)["under-a-file"]
    ns_port, broker_port = free_ports(2)
    out = cli("local", "--namesrv-port", str(ns_port), "--broker-port", str(broker_port), "--store-dir", str(store))
    assert out.returncode == EXIT_CONFIG
    assert one_line(out.stderr).startswith(f"error: cannot use store directory {store}")  # as pymq-broker says it


def test_toml_store_dir_at_the_top_level_says_where_it_belongs(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text(f'store_dir = "{tmp_path / "s"}"\n')
    out = cli("broker", "--config", str(cfg))
    assert out.returncode == EXIT_CONFIG
    assert "it belongs in the [store] table: store.store_dir" in one_line(out.stderr)


# --- pymq-local | tee, then Ctrl-C --------------------------------------------------------------------------


def test_pymq_local_stops_cleanly_when_stdout_is_a_closed_pipe(tmp_path: Path, free_ports) -> None:
    """Like ``pymq-local | tee log`` and Ctrl-C: tee is gone, the stop messages cannot be written,
    and the broker still closes its store (no abort file) and the process exits 0."""
    ns_port, broker_port = free_ports(2)
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymq.cli.local", "--namesrv-port", str(ns_port), "--broker-port", str(broker_port),
         "--store-dir", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "Press Ctrl-C" not in proc.stdout.readline():
            # (an early exit, e.g. a port taken meanwhile, reads EOF: say why rather than time out)
            assert proc.poll() is None, f"pymq-local exited {proc.returncode} at start: {proc.stderr.read()}"
        assert (store / "abort").exists()  # running
        proc.stdout.close()  # the reader (tee) is gone
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == EXIT_OK
        assert not (store / "abort").exists()
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


# --- --version ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["namesrv", "broker", "admin", "local", "bench"])
def test_version_on_every_cli(name: str) -> None:
    out = cli(name, "--version")
    assert out.returncode == 0 and out.stdout.strip().endswith(" " + version(DISTRIBUTION)), out.stdout + out.stderr


# --- bad input ---------------------------------------------------------------------------------------------


def test_admin_given_a_broker_port_says_it_is_a_broker_and_names_the_nameserver(
    tmp_path: Path, processes: list[DaemonProcess]
) -> None:
    ns = namesrv_process(tmp_path)
    processes.append(ns)
    ns.start()
    broker = broker_process(tmp_path, ns.address, "broker-a")
    processes.append(broker)
    broker.start()
    out = cli("admin", "--namesrv", broker.address, "cluster-list")
    assert out.returncode == 1
    assert one_line(out.stderr) == (
        f"error: {broker.address}: this address is a pymq broker (broker-a), not a nameserver: give clients "
        f"a nameserver's address, such as {ns.address} (where this broker registers)\n"
    )


def test_send_delay_level_out_of_range_rejected() -> None:
    out = cli("admin", "--namesrv", "127.0.0.1:1", "send", "--topic", "t", "--body", "x", "--delay-level", "99")
    assert out.returncode == 2 and "--delay-level" in out.stderr and "99" in out.stderr


@pytest.mark.parametrize("tags", ["created paid", "a,b", "a ||", "a | b"])
def test_consume_rejects_tag_expressions_the_broker_cannot_mean(tags: str) -> None:
    out = cli("admin", "--namesrv", "127.0.0.1:1", "consume", "--topic", "t", "--tags", tags)
    assert out.returncode == 2 and "--tags" in out.stderr and "||" in out.stderr


async def test_consume_on_a_missing_topic_says_so(cluster: LocalCluster) -> None:
    code, out, err = await run_admin(cluster.namesrv_addr, "consume", "--topic", "nope", "--wait", "1")
    assert code == 1 and out == ""
    assert one_line(err) == "error: topic nope does not exist (create it with pymq-admin topic-create)\n"


async def test_consume_with_a_good_tag_expression_prints_the_match(cluster: LocalCluster) -> None:
    await cluster.create_topic("orders", 1)
    for tags in ("created", "paid", "other"):
        assert (await run_admin(cluster.namesrv_addr, "send", "--topic", "orders", "--body", tags, "--tags", tags))[
            0
        ] == 0
    code, out, _ = await run_admin(
        cluster.namesrv_addr, "--json", "consume", "--topic", "orders", "--tags", "created || paid"
    )
    assert code == 0 and sorted(m["tags"] for m in json.loads(out)) == ["created", "paid"]


async def test_update_broker_config_parses_values_by_the_settings_type(cluster: LocalCluster) -> None:
    """store.delete_when is text ("10", not 10); store.disk_full_ratio a number; a bad number is refused early."""
    broker = cluster.brokers[0]
    code, _, err = await run_admin(
        cluster.namesrv_addr, "update-broker-config", "--broker", broker.address,
        "--set", "store.delete_when=10", "--set", "store.disk_full_ratio=0.95",
    )  # fmt: skip
    assert code == 0, err
    assert broker.config.store.delete_when == "10" and broker.config.store.disk_full_ratio == 0.95
    code, _, err = await run_admin(
        cluster.namesrv_addr, "update-broker-config", "--broker", broker.address, "--set", "store.disk_full_ratio=lots"
    )
    assert code == 2 and "store.disk_full_ratio=lots" in err
