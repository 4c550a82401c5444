"""What request handlers see of the connection a request came on, and what the dispatcher needs.

Handlers take ``(request, channel)``: a :class:`Channel` is the peer's address, a dict of
per-connection attributes, close callbacks, a way to push a oneway request to the peer and a
way to ask it something and wait for its answer (:meth:`Channel.request`).
:class:`~pymq.transport.connection.Connection` implements it; so can a test double or a
connection speaking another wire format. Nothing here knows how commands become bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pymq.protocol.command import Command


class Channel(Protocol):
    """One peer, as handlers and the broker's client registry see it."""

    #: ``host:port`` of the peer
    remote_addr: str
    #: per-connection data for handlers (e.g. the client id that uses it)
    attrs: dict[str, Any]

    @property
    def is_open(self) -> bool: ...

    def add_close_callback(self, cb: Callable[[Any], None]) -> None:
        """Call ``cb(channel)`` once the connection has closed."""

    def push_oneway(self, cmd: Command) -> None:
        """Send a oneway request to the peer now (e.g. NOTIFY_CONSUMER_IDS_CHANGED)."""

    async def request(self, cmd: Command, timeout: float) -> Command:
        """Send a request to the peer and wait for its answer (e.g. GET_CONSUMER_RUNNING_INFO, broker -> client).

        Raises :class:`~pymq.errors.RequestTimeoutError` when no answer came within ``timeout``
        seconds and :class:`~pymq.errors.ConnectionClosedError` when the connection is (or gets) closed.
        """
        ...

    def close(self) -> None: ...


class ServerChannel(Channel, Protocol):
    """A channel as the dispatcher drives it: answers written back, running handlers counted."""

    #: handlers of this channel's requests that have not answered yet
    inflight: int
    #: requests held waiting for an event (:class:`~pymq.transport.dispatch.Parked`), and the most it may hold
    parked: int
    max_parked: int

    def write_command(self, cmd: Command) -> None:
        """Write a response now; dropped if the connection is gone."""

    def handler_finished(self) -> None:
        """An asynchronous handler of this channel answered."""

    def unparked(self) -> None:
        """A parked request of this channel answered."""


class RequestSink(Protocol):
    """Where a connection hands the requests it receives (the dispatcher)."""

    def dispatch(self, channel: ServerChannel, cmd: Command) -> None: ...
