"""ACL for the RocketMQ C++ client against real daemons: its AclClientRPCHook signatures are checked
against pymq's accounts (nameserver and broker), then the account's permissions on what it asked."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pymq.client import ConsumeFromWhere, MessageQueue, PullConsumer
from pymq.client.admin import AdminClient
from pymq.errors import PymqError
from pymq.testing import DaemonProcess, broker_process, namesrv_process
from tests.acl_accounts import account, acl_toml, admin_account, write_acl

from .conftest import run_script

pytestmark = pytest.mark.integration

BROKER = "broker-a"
ACL = acl_toml(
    admin_account("ops"),
    account("app", topic_perms={"CppAcl": "PUB|SUB"}, default_group_perm="SUB"),
    account("reader", topic_perms={"CppAcl": "SUB"}, default_group_perm="SUB"),
)
OPS = {"access_key": "ops", "secret_key": "ops-secret"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    workdir = tmp_path_factory.mktemp("acl-cpp")
    acl_file = write_acl(workdir / "acl.toml", ACL)
    env = {"PYMQ_ACL__ENABLE": "true", "PYMQ_ACL__FILE": str(acl_file), "PYMQ_HA_PORT": "0"}
    procs: list[DaemonProcess] = []
    try:
        ns = namesrv_process(workdir, env=env).start()
        procs.append(ns)
        broker_env = {**env, "PYMQ_ACL__ACCESS_KEY": "ops", "PYMQ_ACL__SECRET_KEY": "ops-secret"}
        broker = broker_process(workdir, ns.address, BROKER, env=broker_env)
        procs.append(broker)
        broker.start()
        asyncio.run(_create_topic(ns.address))
        yield ns, broker
    finally:
        for p in reversed(procs):
            p.stop()


async def _create_topic(namesrv: str) -> None:
    """Create CppAcl as the admin once the broker has registered, and wait for its route."""
    deadline = time.monotonic() + 15
    async with AdminClient(namesrv, **OPS) as admin:
        while True:
            try:
                await admin.create_topic("CppAcl", queues=2)
                if (await admin.topic_route("CppAcl")).brokerDatas:
                    return
            except PymqError:
                pass  # the broker has not registered yet
            if time.monotonic() > deadline:
                raise AssertionError("CppAcl was not created and routed within 15 s")
            await asyncio.sleep(0.1)


def _send(cpp_python: Path, namesrv: str, home: Path, credentials: dict[str, str] | None) -> dict:
    spec = {"group": "PG_ACL", "messages": [{"topic": "CppAcl", "body_hex": b"signed by the C++ client".hex()}]}
    if credentials is not None:
        spec["credentials"] = credentials
    proc = run_script(cpp_python, "produce_send.py", namesrv, "sync", json.dumps(spec), home=home, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict = json.loads(proc.stdout.strip().splitlines()[-1])["results"][0]
    return result


async def _bodies(namesrv: str) -> list[bytes]:
    pc = PullConsumer(namesrv, "acl-reader", consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **OPS)
    pc.assign([MessageQueue("CppAcl", BROKER, q) for q in range(2)])
    async with pc:
        return [m.body for m in await pc.poll(timeout=2.0)]


async def test_signed_cpp_producer_sends_and_wrong_or_missing_credentials_and_sub_only_accounts_are_refused(
    cpp_python: Path, secured: tuple[DaemonProcess, DaemonProcess], tmp_path: Path
) -> None:
    ns, broker = secured
    ok = await asyncio.to_thread(
        _send, cpp_python, ns.address, tmp_path, {"access_key": "app", "secret_key": "app-secret"}
    )
    assert ok.get("status") == 0, ok
    forged = await asyncio.to_thread(
        _send, cpp_python, ns.address, tmp_path, {"access_key": "app", "secret_key": "not-the-secret"}
    )
    assert "error" in forged, forged
    unsigned = await asyncio.to_thread(_send, cpp_python, ns.address, tmp_path, None)
    assert "error" in unsigned, unsigned
    reader = await asyncio.to_thread(
        _send, cpp_python, ns.address, tmp_path, {"access_key": "reader", "secret_key": "reader-secret"}
    )
    assert "error" in reader, reader  # signed, but no PUB permission on the topic
    # where each was refused (the client says "No route info" whatever the cause): the forged and
    # the unsigned ones at the nameserver's route query, the reader's send at the broker
    ns_log, broker_log = ns.output(), broker.output()
    assert "acl_refused_credentials" in ns_log and "acl_refused_unsigned" in ns_log
    assert "acl_refused_permission" in broker_log and "no PUB permission on topic CppAcl" in broker_log
    assert await _bodies(ns.address) == [b"signed by the C++ client"]  # only the permitted send was stored
