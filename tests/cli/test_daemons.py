"""The daemons as real processes: registration, expiry, graceful stop, refusals, pymq-local."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.helpers import wait_until_sync

pytestmark = pytest.mark.integration


def admin(namesrv: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.admin", "--namesrv", namesrv, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert out.returncode == 0, out.stderr
    return out


def route(namesrv: str, topic: str) -> dict | None:
    out = admin(namesrv, "--json", "topic-route", "--topic", topic, check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def brokers_in_route(namesrv: str, topic: str) -> dict[str, int]:
    r = route(namesrv, topic)
    return {q["brokerName"]: q["writeQueueNums"] for q in r["queueDatas"]} if r else {}


@pytest.fixture
def cluster(tmp_path: Path, processes: list[DaemonProcess]) -> tuple[DaemonProcess, list[DaemonProcess]]:
    ns = namesrv_process(tmp_path, "--broker-expiry", "3", "--scan-interval", "0.5").start()
    processes.append(ns)
    brokers = []
    for name in ("broker-a", "broker-b"):
        b = broker_process(tmp_path, ns.address, name, "--register-interval", "0.5").start()
        processes.append(b)
        brokers.append(b)
    return ns, brokers


def test_topic_routed_then_frozen_broker_expires(cluster) -> None:
    """A topic created through pymq-admin is routed on both brokers; a frozen broker's queues expire."""
    ns, (_a, b) = cluster
    admin(ns.address, "topic-create", "--topic", "orders", "--queues", "6")
    wait_until_sync(lambda: brokers_in_route(ns.address, "orders") == {"broker-a": 6, "broker-b": 6}, what="route")
    info = json.loads(admin(ns.address, "--json", "cluster-list").stdout)
    assert sorted(info["brokerAddrTable"]) == ["broker-a", "broker-b"]
    b.signal(signal.SIGSTOP)  # alive socket, no heartbeats: only the expiry scan can drop it
    try:
        started = time.monotonic()
        wait_until_sync(lambda: brokers_in_route(ns.address, "orders") == {"broker-a": 6}, timeout=15, what="expiry")
        assert time.monotonic() - started >= 1.5  # not before the (3 s) expiry came round
    finally:
        b.signal(signal.SIGCONT)


def test_killed_broker_leaves_route_at_once(cluster) -> None:
    """A SIGKILLed broker's closed channel removes its queue data without waiting for the expiry."""
    ns, (_a, b) = cluster
    admin(ns.address, "topic-create", "--topic", "orders", "--queues", "2")
    wait_until_sync(lambda: len(brokers_in_route(ns.address, "orders")) == 2, what="route")
    b.kill()
    wait_until_sync(lambda: brokers_in_route(ns.address, "orders") == {"broker-a": 2}, timeout=2.5, what="removal")


def test_sigterm_stops_cleanly_and_unregisters(cluster) -> None:
    """SIGTERM: the broker unregisters, exits 0 and leaves a clean store (no abort file)."""
    ns, (_a, b) = cluster
    admin(ns.address, "topic-create", "--topic", "orders", "--queues", "2")
    wait_until_sync(lambda: len(brokers_in_route(ns.address, "orders")) == 2, what="route")
    assert b.stop() == 0
    assert brokers_in_route(ns.address, "orders") == {"broker-a": 2}
    assert not (b.workdir / "broker-b" / "abort").exists()


def test_second_broker_on_same_store_refused(cluster, tmp_path: Path) -> None:
    """A second broker on a store directory in use exits with code 3 and says why."""
    ns, (_a, _) = cluster
    dup = broker_process(tmp_path, ns.address, "broker-a")
    with pytest.raises(RuntimeError) as err:
        dup.start(timeout=20)
    assert dup.proc is not None and dup.proc.returncode == 3
    assert "in use by another process" in str(err.value)


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--port", "abc"], {}), ([], {"PYMQ_PORT": "abc"}), (["--flush", "FAST"], {})],
    ids=["flag", "env", "choice"],
)
def test_bad_config_exits_2_with_one_line(tmp_path: Path, args: list[str], env: dict[str, str]) -> None:
    """A bad flag or PYMQ_ value makes the broker exit 2 with a one-line message, no traceback."""
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.broker", "--store-dir", str(tmp_path / "s"), *args],
        capture_output=True, text=True, timeout=30, env={**os.environ, **env},
    )  # fmt: skip
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and out.stderr.strip()


def test_bad_toml_exits_2(tmp_path: Path) -> None:
    """An invalid value in the TOML config is reported as one line with exit code 2."""
    cfg = tmp_path / "broker.toml"
    cfg.write_text('[store]\nflush_disk_type = "SOMETIMES"\n')
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.broker", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "flush_disk_type" in out.stderr and "Traceback" not in out.stderr


def test_unknown_topic_route_is_one_line_error(cluster) -> None:
    """topic-route for an unknown topic: non-zero exit, one line on stderr, no traceback."""
    ns, _ = cluster
    out = admin(ns.address, "topic-route", "--topic", "nope", check=False)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "nope" in out.stderr


def test_unreachable_namesrv_is_one_line_error() -> None:
    """An unreachable nameserver: exit 1 and a one-line error."""
    out = admin("127.0.0.1:1", "cluster-list", check=False)
    assert out.returncode == 1 and out.stderr.startswith("error:") and out.stderr.count("\n") == 1


def test_pymq_local_serves_and_stops_on_ctrl_c(tmp_path: Path, free_ports) -> None:
    """pymq-local prints its addresses, serves pymq-admin, and exits 0 on SIGINT."""
    ns_port, broker_port = free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymq.cli.local", "--namesrv-port", str(ns_port), "--broker-port", str(broker_port),
         "--grpc-port", "0",
         "--store-dir", str(tmp_path / "store")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            lines.append(line)
            if "Press Ctrl-C" in line:
                break
        text = "".join(lines)
        assert f"127.0.0.1:{ns_port}" in text and f"127.0.0.1:{broker_port}" in text
        admin(f"127.0.0.1:{ns_port}", "topic-create", "--topic", "hello", "--queues", "2")
        # the web dashboard is on by default: its URL is in the banner and it shows this cluster
        url = re.search(r"dashboard +(http://\S+)", text)
        assert url, text
        with urllib.request.urlopen(url.group(1) + "topics", timeout=10) as page:
            assert page.status == 200 and ">hello</a>" in page.read().decode()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def banner_of(args: list[str]) -> str:
    """Start pymq-local with ``args``, read its banner, stop it with SIGINT (exit 0)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymq.cli.local", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            lines.append(proc.stdout.readline())  # type: ignore[union-attr]
            if "Press Ctrl-C" in lines[-1]:
                break
        text = "".join(lines)
        url = re.search(r"dashboard +(http://\S+)", text)
        if url:
            with urllib.request.urlopen(url.group(1) + "cluster", timeout=10) as page:
                assert page.status == 200 and "broker" in page.read().decode()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        return text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_pymq_local_dashboard_on_a_taken_port_moves_and_can_be_turned_off(tmp_path: Path, free_ports) -> None:
    ns_port, broker_port = free_ports(2)
    base = ["--namesrv-port", str(ns_port), "--broker-port", str(broker_port), "--store-dir", str(tmp_path / "s")]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        text = banner_of([*base, "--dashboard-port", str(port)])
    url = re.search(r"dashboard +http://127\.0\.0\.1:(\d+)/", text)
    assert url and int(url.group(1)) not in (port, 0), text
    assert "dashboard   off (--no-dashboard)" in banner_of([*base, "--no-dashboard"])


def test_broker_without_a_nameserver_logs_the_cause_at_once_rate_limited(
    tmp_path: Path, processes: list[DaemonProcess], free_ports
) -> None:
    """No nameserver at the address: the first log line gives the real cause and what it means; the
    registrations that follow (every 0.2 s here) are not each logged again."""
    (dead,) = free_ports(1)
    b = broker_process(tmp_path, f"127.0.0.1:{dead}", "broker-a", "--register-interval", "0.2").start()
    processes.append(b)

    def failures() -> list[dict]:
        events = [json.loads(line) for line in b.output().splitlines() if line.startswith("{")]
        return [e for e in events if e["event"] == "register_failed"]

    wait_until_sync(lambda: failures(), what="a register_failed line")
    first = failures()[0]
    assert "[Errno 111]" in first["reason"], first  # connection refused, not only "backing off"
    assert "cannot find this broker until it registers" in first["effect"], first
    time.sleep(2.0)  # about ten more failed registrations
    assert b.running()
    assert len(failures()) == 1, failures()


def start_pymq_local(tmp_path: Path, free_ports) -> tuple[subprocess.Popen[str], str, str]:
    """pymq-local in the background: (process, nameserver address, its banner)."""
    ns_port, broker_port = free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymq.cli.local", "--namesrv-port", str(ns_port), "--broker-port", str(broker_port),
         "--grpc-port", "0",
         "--store-dir", str(tmp_path / "store")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        lines.append(line)
        if "Press Ctrl-C" in line:
            break
    return proc, f"127.0.0.1:{ns_port}", "".join(lines)


CONSUME_NEW_TOPICS = """
import asyncio, sys
from pymq.client import ConsumeFromWhere, Message, Producer, PullConsumer, SimpleConsumer

async def main(ns):
    pull = PullConsumer(ns, "g-pull", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pull.subscribe("fresh-pull")
    simple = SimpleConsumer(ns, "g-pop")
    simple.subscribe("fresh-pop")
    async with pull, simple:
        assert await pull.poll(timeout=0.5) == []
        assert await simple.receive(4, invisible_duration=10.0, await_duration=0.5) == []
        async with Producer(ns) as producer:
            await producer.send(Message("fresh-pull", b"to pull"))
            await producer.send(Message("fresh-pop", b"to pop"))
        got = []
        for _ in range(40):
            got += [m.body for m in await pull.poll(timeout=0.5)]
            got += [m.body for m in await simple.receive(4, invisible_duration=10.0, await_duration=0.5)]
            if len(got) == 2:
                break
        print(sorted(got))

asyncio.run(main(sys.argv[1]))
"""


def test_pymq_local_creates_a_topic_a_consumer_uses_first(tmp_path: Path, free_ports) -> None:
    """In pymq-local a pull consumer's subscription and a pop of topics nobody created work (the
    topics are created, as a send would create them), and the banner says so."""
    proc, ns, banner = start_pymq_local(tmp_path, free_ports)
    try:
        assert "created on first use here, with 8 queues: the first send, subscription, pull or\npop" in banner, banner
        out = subprocess.run([sys.executable, "-c", CONSUME_NEW_TOPICS, ns], capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr
        assert out.stdout == "[b'to pop', b'to pull']\n"
        route = json.loads(admin(ns, "--json", "topic-route", "--topic", "fresh-pop").stdout)
        assert [q["writeQueueNums"] for q in route["queueDatas"]] == [8]  # as the banner says
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
