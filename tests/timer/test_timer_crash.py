"""Timer messages on a real broker process killed with SIGKILL: none lost, none early."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, Message, MessageExt, MessageQueue
from pymq.client.sync import Producer, PullConsumer
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.helpers import wait_until_sync

pytestmark = pytest.mark.integration


def create_topic(namesrv: str, topic: str) -> None:
    admin = [sys.executable, "-m", "pymq.cli.admin", "--namesrv", namesrv]
    out = subprocess.run(
        [*admin, "topic-create", "--topic", topic, "--queues", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def read_timed(namesrv: str, group: str, want: int, timeout: float) -> dict[bytes, list[MessageExt]]:
    """body -> every copy on the topic (reading until ``want`` distinct bodies)."""
    seen: dict[bytes, list[MessageExt]] = {}
    pc = PullConsumer(namesrv, group, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    pc.assign([MessageQueue("timed", "broker-a", q) for q in range(2)])
    with pc:
        deadline = time.monotonic() + timeout
        while len(seen) < want and time.monotonic() < deadline:
            for m in pc.poll(timeout=0.5):
                seen.setdefault(m.body, []).append(m)
    return seen


def test_pending_timers_survive_kill_9_none_early_none_lost(tmp_path: Path, processes: list[DaemonProcess]) -> None:
    ns = namesrv_process(tmp_path).start()
    processes.append(ns)
    broker = broker_process(tmp_path, ns.address, "broker-a", "--register-interval", "0.5").start()
    processes.append(broker)
    create_topic(ns.address, "timed")
    t0 = int(time.time() * 1000)
    # due before the kill, during the restart, and well after it
    targets = {f"a{i}".encode(): t0 + 1500 + i * 25 for i in range(40)}
    targets |= {f"b{i}".encode(): t0 + 5000 + i * 25 for i in range(40)}
    targets |= {f"c{i}".encode(): t0 + 16000 + i * 25 for i in range(40)}
    with Producer(ns.address) as p:
        for body, at in targets.items():
            p.send(Message("timed", body).set_delivery_time(at))
        for i in range(3):  # a merged-delay window open across the kill: one delivery, 3 merged
            p.send(Message("timed", f"m{i}".encode()).set_merge("cart", 9000))
    targets[b"m0"] = t0 + 9000
    wait_until_sync(lambda: time.time() * 1000 > t0 + 4000, timeout=10, what="the a-timers' time")
    broker.kill()
    restarted = broker_process(tmp_path, ns.address, "broker-a", "--register-interval", "0.5").start()
    processes.append(restarted)

    seen = read_timed(ns.address, "check", len(targets), timeout=40)
    assert set(seen) == set(targets), f"lost: {sorted(set(targets) - set(seen))[:5]}"
    first = {b: min(m.store_timestamp for m in copies) for b, copies in seen.items()}
    early = {b: ts for b, ts in first.items() if ts < targets[b]}
    assert not early
    # The last group fell due long after the restart: each within a second of its time.
    late = {b: ts - targets[b] for b, ts in first.items() if b.startswith(b"c") and ts > targets[b] + 1000}
    assert not late
    assert {m.properties.get("MERGE_COUNT") for m in seen[b"m0"]} == {"3"}
