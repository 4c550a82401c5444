"""Hooks the dispatcher runs around handlers: role gating, metrics, later ACL.

An interceptor's :meth:`~Interceptor.before` may answer a request instead of its handler
(a slave refusing writes); :meth:`~Interceptor.after` is told of every answered request
(metrics). The dispatcher builds each request code's chain once, when handlers or
interceptors are registered, from the methods a subclass overrides: an interceptor that
only overrides ``after`` costs the requests it does not apply to nothing at all.
"""

from __future__ import annotations

from collections.abc import Iterable

from pymq.protocol.command import Command
from pymq.transport.channel import Channel


class Interceptor:
    """Override :meth:`before` and/or :meth:`after`; ``codes`` limits it to some request codes."""

    #: request codes this interceptor applies to; None: every code
    codes: frozenset[int] | None = None

    def before(self, request: Command, channel: Channel) -> Command | None:
        """An answer to send instead of running the handler, or None to let the request through.

        May raise :class:`~pymq.errors.RemoteError` to answer with its code, as handlers do.
        """
        return None

    def after(self, request: Command, channel: Channel, response: Command | None, seconds: float) -> None:
        """Called once ``request`` is answered (``response`` None: a oneway/empty answer),
        with the seconds since it arrived. Error answers are passed as their response."""

    def attached(self, codes: Iterable[int]) -> None:
        """The request codes it now applies to (called when the dispatcher's table changes)."""

    def applies_to(self, code: int) -> bool:
        return self.codes is None or code in self.codes

    @property
    def has_before(self) -> bool:
        return type(self).before is not Interceptor.before

    @property
    def has_after(self) -> bool:
        return type(self).after is not Interceptor.after
