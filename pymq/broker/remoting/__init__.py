"""RocketMQ 4.x clients on the broker's port (issue 30): remoting requests translated onto the native handlers.

``gateway`` holds the plumbing (a translated request goes through the broker's own
dispatcher, its answer comes back through the translator); ``clients``, ``produce`` and ``consume`` hold
the translators of each request code a 4.x client sends; ``context`` what they may know of
the broker. The pure mappings (headers, bodies, RocketMQ's message layout) live in
:mod:`pymq.remoting`, which does no I/O.
"""

from __future__ import annotations

from pymq.broker.remoting.clients import client_translators
from pymq.broker.remoting.consume import consume_pushes, consume_translators
from pymq.broker.remoting.context import RemotingContext
from pymq.broker.remoting.gateway import Authenticate, PushMapper, RemotingGateway, Translator
from pymq.broker.remoting.produce import produce_pushes, produce_translators
from pymq.protocol.command import Command
from pymq.transport.dispatch import Dispatcher, Handler


def remoting_handlers(
    native: Dispatcher, ctx: RemotingContext, authenticate: Authenticate | None = None
) -> dict[int, Handler]:
    """The remoting dispatcher's table: every translated code, handed on to ``native``.

    ``authenticate`` (under ACL) checks each request's 4.x signature before it is translated.
    """
    translators: dict[int, Translator] = {
        **client_translators(ctx),
        **produce_translators(ctx),
        **consume_translators(ctx),
    }
    pushes: dict[int, PushMapper] = {**produce_pushes(ctx), **consume_pushes(ctx)}

    def push(cmd: Command) -> Command | None:
        mapper = pushes.get(cmd.code)
        return mapper(cmd) if mapper is not None else None

    return RemotingGateway(native, push, authenticate).table(translators)


__all__ = ["RemotingContext", "remoting_handlers"]
