"""ACL on the HA link: the slave signs its HELLO as a request, the master checks it like any request.

The HA link has frames of its own (:mod:`pymq.broker.ha.codec`), not RPC requests, so the
dispatcher's ACL interceptor never sees it. Instead the slave signs a request of code
HA_PULL_COMMITLOG (an admin code in the permission table) whose body is its HELLO body,
and sends the signing fields in an AUTH frame before the HELLO; the master rebuilds that
request and runs the broker's ACL interceptor on it. The signature covers the HELLO, its
timestamp window and the interceptor's replay guard apply; TLS (``[tls]``) protects the
stream itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymq.protocol.codes import RequestCode
from pymq.protocol.command import Command

#: what signs the slave's HELLO (``pymq.security.daemon.daemon_signer``)
Sign = Callable[[Command], None]
#: the master's check: (signed request, peer address) -> None if allowed, else the refusal remark
Authenticate = Callable[[Command, str], "str | None"]


def hello_request(hello_body: bytes | memoryview, fields: dict[str, Any] | None = None) -> Command:
    """The request an AUTH frame's fields sign: HA_PULL_COMMITLOG with the HELLO body."""
    return Command.request(RequestCode.HA_PULL_COMMITLOG, dict(fields or {}), bytes(hello_body))


def sign_hello(sign: Sign, hello_body: bytes | memoryview) -> dict[str, Any]:
    """The AUTH fields for a HELLO body."""
    cmd = hello_request(hello_body)
    sign(cmd)
    return cmd.ext


@dataclass(frozen=True, slots=True)
class _Peer:
    """What the ACL interceptor reads of a channel: the peer's address (no session: the link's
    requests are each signed)."""

    remote_addr: str
    attrs: dict[str, Any] = field(default_factory=dict)

    def is_open(self) -> bool:
        return True

    def add_close_callback(self, cb: Callable[[Any], None]) -> None:
        pass

    def push_oneway(self, cmd: Command) -> None:
        pass

    async def request(self, cmd: Command, timeout: float) -> Command:
        raise NotImplementedError("the ACL check's peer cannot be asked anything")

    def close(self) -> None:
        pass


def acl_authenticate(interceptor: Any) -> Authenticate:
    """The master's check through the broker's ACL interceptor (signature, window, replay, admin)."""

    def check(cmd: Command, peer: str) -> str | None:
        refused = interceptor.before(cmd, _Peer(peer))
        return None if refused is None else str(refused.remark or "not permitted")

    return check
