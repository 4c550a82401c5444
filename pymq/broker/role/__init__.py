"""The broker's role: the state machine (MASTER / SLAVE / FENCED / PROMOTING), the write gate that
follows it, the role changes that drive it, and the services only a master runs."""

from pymq.broker.role.state import Role, RoleEvent, RoleMachine, RoleState, RoleTransitionError

__all__ = ["Role", "RoleEvent", "RoleMachine", "RoleState", "RoleTransitionError"]
