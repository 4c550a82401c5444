"""The broker's role state machine: the transition table, the fields each event sets, observers."""

from __future__ import annotations

import pytest

from pymq.broker.role.gate import ReadOnlyRole, follow_role
from pymq.broker.role.state import (
    TRANSITIONS,
    Role,
    RoleEvent,
    RoleMachine,
    RoleState,
    RoleTransitionError,
    initial_role,
)
from pymq.config import BrokerConfig, BrokerRole
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.transport.dispatch import Dispatcher

MASTER = Role(RoleState.MASTER, BrokerRole.SYNC_MASTER, 0, None, 3)
SLAVE = Role(RoleState.SLAVE, BrokerRole.SLAVE, 1, "127.0.0.1:10911", 3)


def test_initial_role_follows_the_config() -> None:
    """role SLAVE or a non-zero broker id start as SLAVE; otherwise MASTER of the configured flavour."""
    assert initial_role(BrokerConfig(role=BrokerRole.SYNC_MASTER)) == Role(RoleState.MASTER, BrokerRole.SYNC_MASTER, 0)
    slave = initial_role(BrokerConfig(broker_id=2, master_addr="127.0.0.1:1"))
    assert (slave.state, slave.broker_id, slave.master_addr) == (RoleState.SLAVE, 2, "127.0.0.1:1")
    # a SLAVE configured without an id registers as 1, never as the master's 0
    assert initial_role(BrokerConfig(role=BrokerRole.SLAVE)).broker_id == 1


def test_every_pair_outside_the_table_is_refused() -> None:
    """Only the table's (state, event) pairs apply; any other raises and changes nothing."""
    for state in RoleState:
        for event in RoleEvent:
            if event is RoleEvent.ABORT or (state, event) in TRANSITIONS:
                continue
            machine = RoleMachine(Role(state, BrokerRole.ASYNC_MASTER, 0))
            before = machine.current
            with pytest.raises(RoleTransitionError):
                machine.fire(event, flavour=BrokerRole.ASYNC_MASTER, master_addr="127.0.0.1:1", broker_id=1)
            assert machine.current is before


def test_a_switchover_walks_master_fenced_slave_and_slave_promoting_master() -> None:
    """The admin's switchover, as transitions: fence, demote; promote, promoted; observers see each."""
    seen: list[tuple[RoleState, RoleState]] = []
    old_master = RoleMachine(MASTER)
    old_master.subscribe(lambda old, new: seen.append((old.state, new.state)))
    old_master.fire(RoleEvent.FENCE)
    assert not old_master.current.writable and old_master.current.name == "FENCED"
    demoted = old_master.fire(RoleEvent.DEMOTE, master_addr="127.0.0.1:2", broker_id=1)
    assert (demoted.state, demoted.flavour, demoted.broker_id) == (RoleState.SLAVE, BrokerRole.SLAVE, 1)
    assert seen == [(RoleState.MASTER, RoleState.FENCED), (RoleState.FENCED, RoleState.SLAVE)]

    new_master = RoleMachine(SLAVE)
    new_master.fire(RoleEvent.PROMOTE)
    assert new_master.current.state is RoleState.PROMOTING and new_master.current.is_slave
    assert not new_master.current.writable and new_master.current.broker_id == 1
    promoted = new_master.fire(RoleEvent.PROMOTED, flavour=BrokerRole.ASYNC_MASTER, epoch=4)
    assert promoted == Role(RoleState.MASTER, BrokerRole.ASYNC_MASTER, 0, None, 4)
    assert promoted.writable and not promoted.sync_master
    assert new_master.fire(RoleEvent.RETUNE, flavour=BrokerRole.SYNC_MASTER).sync_master and new_master.sync_master
    new_master.fire(RoleEvent.FENCE)
    assert not new_master.sync_master  # a fenced master waits for no replica: it takes no writes


def test_abort_returns_to_where_the_promotion_began() -> None:
    """A promotion that fails part-way goes back to SLAVE or FENCED, unchanged; no abort otherwise."""
    for start in (SLAVE, Role(RoleState.FENCED, BrokerRole.SYNC_MASTER, 0, None, 3)):
        machine = RoleMachine(start)
        machine.fire(RoleEvent.PROMOTE)
        assert machine.fire(RoleEvent.ABORT) == start
        with pytest.raises(RoleTransitionError):
            machine.fire(RoleEvent.ABORT)


def test_events_check_their_fields() -> None:
    """A promotion needs a master flavour; a demotion a master address and a slave id."""
    machine = RoleMachine(SLAVE)
    machine.fire(RoleEvent.PROMOTE)
    with pytest.raises(RoleTransitionError, match="master flavour"):
        machine.fire(RoleEvent.PROMOTED, flavour=BrokerRole.SLAVE)
    master = RoleMachine(MASTER)
    with pytest.raises(RoleTransitionError, match="master address"):
        master.fire(RoleEvent.DEMOTE, broker_id=1)
    with pytest.raises(RoleTransitionError, match="slave broker id"):
        master.fire(RoleEvent.DEMOTE, master_addr="127.0.0.1:2", broker_id=0)
    assert master.current is MASTER
    assert master.fire(RoleEvent.RETUNE, flavour=BrokerRole.ASYNC_MASTER).flavour is BrokerRole.ASYNC_MASTER


def test_the_write_gate_follows_the_role() -> None:
    """The read-only gate is on the dispatcher exactly while the role is not writable."""
    dispatcher = Dispatcher({RequestCode.SEND_MESSAGE: lambda cmd, ch: cmd.response()})
    gate = ReadOnlyRole()
    machine = RoleMachine(MASTER)
    follow_role(machine, dispatcher, gate)
    assert gate not in dispatcher.interceptors
    machine.fire(RoleEvent.FENCE)
    assert dispatcher.interceptors.count(gate) == 1
    refusal = gate.before(Command.request(RequestCode.SEND_MESSAGE), None)  # type: ignore[arg-type]
    assert refusal is not None and refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE
    machine.fire(RoleEvent.DEMOTE, master_addr="127.0.0.1:2", broker_id=1)
    machine.fire(RoleEvent.PROMOTE)
    assert dispatcher.interceptors.count(gate) == 1
    machine.fire(RoleEvent.PROMOTED, flavour=BrokerRole.SYNC_MASTER)
    assert gate not in dispatcher.interceptors
