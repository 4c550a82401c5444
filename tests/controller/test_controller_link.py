"""The broker's ControllerLink (issue 32) with a scripted controller, no sockets: a change of the
master's sync-state set is reported at once (not at the next heartbeat interval), and the
controller's set in a MASTER answer is handed to the master to count."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from pymq.broker.role.controlled import ControllerLink
from pymq.broker.role.state import RoleState
from pymq.config import BrokerConfig
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body
from pymq.protocol.requests import ControllerAssignment
from pymq.tasks import wait_within

ME = "127.0.0.1:5000"


class ScriptedController:
    """Answers every heartbeat MASTER with ``sync_state_set``; keeps the sync sets reported."""

    def __init__(self) -> None:
        self.reported: list[list[str]] = []
        self.seqs: list[int] = []
        self.sync_state_set = ""
        self.beat = asyncio.Event()

    async def invoke(self, addr: str, cmd: Command, timeout: float) -> Command:
        body = decode_body(cmd.body)
        self.reported.append(body["syncSet"])
        self.seqs.append(body["syncSetSeq"])
        self.beat.set()
        a = ControllerAssignment(
            role="MASTER", master_addr=ME, epoch=1, broker_id=0, lease_ms=5000, sync_state_set=self.sync_state_set
        )
        return cmd.response(ext=a.to_ext())

    async def close(self) -> None:
        pass

    async def beats(self, n: int) -> None:
        while len(self.reported) < n:
            self.beat.clear()
            await self.beat.wait()


def a_master() -> Any:
    role = SimpleNamespace(current=SimpleNamespace(state=RoleState.MASTER, epoch=1, master_addr=None))
    return SimpleNamespace(host=SimpleNamespace(role=role, replication=None), _lock=asyncio.Lock())


async def test_a_sync_state_set_change_is_reported_at_once_and_the_answer_counted() -> None:
    config = BrokerConfig(controller_mode=True, controller_heartbeat_seconds=60, namesrv_addrs=["127.0.0.1:1"])
    ctl = ScriptedController()
    members = ["127.0.0.1:6000"]
    confirmed: list[list[str]] = []
    link = ControllerLink(
        config,
        ctl,  # type: ignore[arg-type]
        a_master(),
        address=lambda: ME,
        max_offset=lambda: 100,
        sync_set=lambda: list(members),
        confirm_sync_set=confirmed.append,
    )
    await link.start()
    try:
        await wait_within(ctl.beats(1), 5)
        assert ctl.reported == [["127.0.0.1:6000"]] and confirmed == [[]] and link.lease_valid()
        members.append("127.0.0.1:7000")
        ctl.sync_state_set = "127.0.0.1:6000,127.0.0.1:7000"
        link.wake()  # the set grew: a heartbeat now, though the interval is a minute
        await wait_within(ctl.beats(2), 5)
        assert ctl.reported[1] == ["127.0.0.1:6000", "127.0.0.1:7000"]
        await asyncio.sleep(0.05)
        assert confirmed[1] == ["127.0.0.1:6000", "127.0.0.1:7000"]  # the controller's set, counted
        assert len(ctl.reported) == 2  # and back to the interval
        assert ctl.seqs[0] < ctl.seqs[1]  # each report numbered: the controller ignores a delayed older one
    finally:
        await link.stop()
