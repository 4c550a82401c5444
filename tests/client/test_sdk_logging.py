"""pymq logs like a library: stdlib logging under ``pymq``, silent by default, never on stdout;
the daemons' configure_logging renders the same records with structlog."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from pymq.logs import configure_logging, event_fields, get_logger

#: a whole client session against an in-process cluster: producer, push consumer (rebalance,
#: queue assignment), pull consumer and the blocking facade; prints only "done"
SESSION = """
import asyncio, logging, sys, tempfile
from pymq.client import ConsumeFromWhere, ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from pymq.client import sync
from pymq.testing import LocalCluster

{setup}

async def main():
    async with LocalCluster(tempfile.mkdtemp()) as cluster:
        await cluster.create_topic("orders", 2)
        async with Producer(cluster.namesrv_addr) as producer:
            await producer.send(Message("orders", b"hello"))
        got = asyncio.Event()
        push = PushConsumer(cluster.namesrv_addr, "push", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        push.subscribe("orders")
        async def handle(msgs):
            got.set()
            return ConsumeResult.SUCCESS
        push.register_listener(handle)
        async with push:
            await asyncio.wait_for(got.wait(), 20)
        pull = PullConsumer(cluster.namesrv_addr, "pull", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        pull.subscribe("orders")
        async with pull:
            assert await pull.poll(timeout=10)
        def blocking():
            with sync.Producer(cluster.namesrv_addr, "sync-p") as p:
                p.send(Message("orders", b"again"))
        await asyncio.to_thread(blocking)

asyncio.run(main())
print("done")
"""


def run_session(setup: str = "") -> subprocess.CompletedProcess[str]:
    code = SESSION.format(setup=textwrap.dedent(setup))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_sdk_and_in_process_servers_print_nothing_by_default() -> None:
    """At default settings a whole session (servers included) writes nothing but the program's own output."""
    out = run_session()
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"
    assert out.stderr == ""


@pytest.mark.integration
def test_sdk_logs_go_to_the_logging_configuration() -> None:
    """logging.basicConfig turns the SDK's logs on, on the configured stream, under pymq.* names."""
    out = run_session("logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format='%(name)s|%(message)s')")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"
    lines = out.stderr.splitlines()
    assert any(line.startswith("pymq.client.rebalance|queue_assigned group=push") for line in lines), lines
    assert any(line.startswith("pymq.transport.server|listening") for line in lines), lines


@pytest.mark.integration
def test_logging_level_silences_the_sdk() -> None:
    """basicConfig(level=ERROR) leaves nothing of pymq's debug and info events."""
    out = run_session("logging.basicConfig(level=logging.ERROR, stream=sys.stderr)")
    assert out.returncode == 0 and out.stdout == "done\n" and out.stderr == ""


def test_records_carry_the_event_and_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("client.test", group="g")
    with caplog.at_level(logging.INFO, logger="pymq"):
        log.debug("not_enabled", x=1)
        log.info("queue_assigned", queue="orders@broker-a:0", offset=7, note="two words")
    [record] = caplog.records
    assert record.name == "pymq.client.test" and record.levelno == logging.INFO
    assert record.getMessage() == "queue_assigned group=g queue=orders@broker-a:0 offset=7 note='two words'"
    assert event_fields(record) == {
        "event": "queue_assigned",
        "group": "g",
        "queue": "orders@broker-a:0",
        "offset": 7,
        "note": "two words",
    }
    assert record.funcName == "test_records_carry_the_event_and_its_fields"  # the caller, not the wrapper


def test_exception_keeps_the_traceback(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("client.test")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("listener_failed", count=2)
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info and record.exc_info[1].args == ("boom",)


@pytest.fixture
def daemon_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    yield stream
    configure_logging("warning", json=False)  # back to what tests/conftest.py set up


def test_daemon_json_lines(daemon_stream: io.StringIO) -> None:
    """configure_logging(json=True): one JSON object per record, pymq's fields and foreign records alike."""
    configure_logging("info", json=True, stream=daemon_stream)
    get_logger("broker.store").info("store_opened", files=3)
    get_logger("broker").debug("too_detailed")
    logging.getLogger("somelib").warning("plain %s", "text")
    try:
        raise OSError("disk")
    except OSError:
        get_logger("broker.store.flush").exception("commitlog_flush_failed")
    lines = [json.loads(line) for line in daemon_stream.getvalue().splitlines()]
    assert [e["event"] for e in lines] == ["store_opened", "plain text", "commitlog_flush_failed"]
    assert lines[0]["component"] == "broker.store" and lines[0]["files"] == 3 and lines[0]["level"] == "info"
    assert "timestamp" in lines[0]
    assert lines[1]["logger"] == "somelib" and lines[1]["level"] == "warning"
    assert lines[2]["level"] == "error" and "OSError: disk" in lines[2]["exception"]


def test_daemon_console_one_line_per_event(daemon_stream: io.StringIO) -> None:
    configure_logging("info", json=False, stream=daemon_stream)
    configure_logging("info", json=False, stream=daemon_stream)  # a second call replaces, never doubles
    get_logger("cli").error("startup_failed", reason="port 9876 in use")
    [line] = daemon_stream.getvalue().splitlines()
    assert "startup_failed" in line and "port 9876 in use" in line and "error" in line
