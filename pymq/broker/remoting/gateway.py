"""How a RocketMQ 4.x request reaches the broker's own handlers: translated, never re-implemented.

A remoting request is answered by a *translator*: it turns the request into the native
:class:`~pymq.protocol.command.Command` the broker's handlers already serve (pymq's header
names, pymq's records) and says how to turn the native answer back. The native command goes
through the broker's own :class:`~pymq.transport.dispatch.Dispatcher`, so every interceptor
applies exactly as it does to pymq's clients: the read-only gate of a slave, the controller's
lease gate, the priority interceptor, stats and metrics. One put path, one pull path.

The native handlers see a :class:`RemotingChannel`, one per connection: it writes their
answers back through the translator of the request they answer, translates what the broker
pushes (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE), and is the channel the
consumer and producer registries keep for the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymq.logs import get_logger
from pymq.protocol.codes import RequestCode as NativeCode
from pymq.protocol.codes import ResponseCode
from pymq.protocol.command import FLAG_ONEWAY, Command
from pymq.remoting.message_layout import from_stored_records
from pymq.transport.channel import Channel, ServerChannel
from pymq.transport.dispatch import Dispatcher, Handler

log = get_logger("broker.remoting")

#: native response -> remoting response (same opaque); None: send nothing
ResponseMapper = Callable[[Command], Command | None]
#: native request the broker pushes -> remoting request; None: not sent to remoting clients
PushMapper = Callable[[Command], Command | None]

#: the key of a connection's RemotingChannel in its attrs
_ATTR = "remoting_channel"


@dataclass(slots=True)
class Translated:
    """A translator's answer: the native request to dispatch, and how to map its answer back."""

    native: Command
    answer: ResponseMapper


#: remoting request, its channel -> a Translated, or a remoting response to send as it is
Translator = Callable[[Command, "RemotingChannel"], "Translated | Command"]


class RemotingChannel:
    """The channel native handlers see for one remoting connection (implements ServerChannel)."""

    __slots__ = ("_answers", "_push", "attrs", "authenticated_as", "conn", "remote_addr")

    def __init__(self, conn: ServerChannel, push: Callable[[Command], Command | None]) -> None:
        self.conn = conn
        self.remote_addr = conn.remote_addr
        #: the connection's own attrs (one dict: what a handler keeps there, the connection keeps)
        self.attrs: dict[str, Any] = conn.attrs
        #: under ACL, while a translated request is dispatched: the access key its 4.x signature proved
        #: (the native ACL interceptor then checks only permissions; see security.interceptor)
        self.authenticated_as: str | None = None
        #: opaque -> how to map the native answer to that request
        self._answers: dict[int, ResponseMapper] = {}
        self._push = push

    # --- Channel -------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self.conn.is_open

    def add_close_callback(self, cb: Callable[[Any], None]) -> None:
        self.conn.add_close_callback(lambda _conn: cb(self))

    def push_oneway(self, cmd: Command) -> None:
        mapped = self._push(cmd)
        if mapped is not None:
            self.conn.push_oneway(mapped)

    async def request(self, cmd: Command, timeout: float) -> Command:
        """A broker -> client request with an answer (GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY,
        issue 33): RocketMQ 4.x uses the same codes and header names, so it is sent as it is, except that
        CONSUME_MESSAGE_DIRECTLY's message goes in MessageDecoder's layout (as RocketMQ's broker stores and
        sends it); the answer (a JSON body) comes back as the client wrote it."""
        if cmd.code == NativeCode.CONSUME_MESSAGE_DIRECTLY:
            body = from_stored_records(cmd.body_bytes())
            cmd = Command(cmd.code, cmd.opaque, cmd.flags, cmd.remark, dict(cmd.ext), body)
        return await self.conn.request(cmd, timeout)

    def close(self) -> None:
        self.conn.close()

    # --- ServerChannel: the native dispatcher's side -----------------------------------------------

    @property
    def inflight(self) -> int:
        return self.conn.inflight

    @inflight.setter
    def inflight(self, value: int) -> None:
        self.conn.inflight = value

    @property
    def parked(self) -> int:
        return self.conn.parked

    @parked.setter
    def parked(self, value: int) -> None:
        self.conn.parked = value

    @property
    def max_parked(self) -> int:
        return self.conn.max_parked

    @max_parked.setter
    def max_parked(self, value: int) -> None:
        self.conn.max_parked = value

    def handler_finished(self) -> None:
        self.conn.handler_finished()

    def unparked(self) -> None:
        self.conn.unparked()

    def expect(self, opaque: int, answer: ResponseMapper) -> None:
        self._answers[opaque] = answer

    def write_command(self, cmd: Command) -> None:
        """A native answer: mapped by its request's translator and written to the client."""
        answer = self._answers.pop(cmd.opaque, None)
        if answer is None:  # an answer nobody waits for (a oneway's): nothing to send
            return
        try:
            mapped = answer(cmd)
        except Exception as exc:  # a mapping bug must not leave the client waiting
            log.error("remoting_answer_mapping_failed", code=cmd.code, peer=self.remote_addr, exc_info=exc)
            mapped = Command(int(ResponseCode.SYSTEM_ERROR), cmd.opaque, cmd.flags, f"{type(exc).__name__}: {exc}")
        if mapped is not None:
            mapped.opaque = cmd.opaque
            self.conn.write_command(mapped)


def remoting_channel(channel: Channel, push: Callable[[Command], Command | None]) -> RemotingChannel:
    """The connection's RemotingChannel (made on its first request; the registries keep this one)."""
    rc = channel.attrs.get(_ATTR)
    if rc is None:
        # the dispatcher hands handlers its ServerChannel (the connection), typed as a Channel
        rc = channel.attrs[_ATTR] = RemotingChannel(channel, push)  # type: ignore[arg-type]
    return rc


def passthrough(resp: Command) -> Command:
    """The native answer as the remoting answer (codes and ext names that agree)."""
    return resp


#: under ACL: the request's access key (or the white-list marker), or a refusal; None: no ACL
Authenticate = Callable[[Command, Channel], "str | Command | None"]


class RemotingGateway:
    """Builds the remoting dispatcher's handlers from translators; each hands its native request on."""

    def __init__(self, native: Dispatcher, push: PushMapper, authenticate: Authenticate | None = None) -> None:
        self.native = native
        self.push = push
        self.authenticate = authenticate

    def handler(self, translate: Translator) -> Handler:
        native = self.native
        push = self.push
        authenticate = self.authenticate

        def handle(cmd: Command, channel: Channel) -> Command | None:
            rc = channel.attrs.get(_ATTR) or remoting_channel(channel, push)
            who = None
            if authenticate is not None:
                who = authenticate(cmd, rc)
                if isinstance(who, Command):
                    return who  # refused before anything is translated
            # a RemoteError raised here is answered by the remoting dispatcher with its code and remark
            out = translate(cmd, rc)
            if isinstance(out, Command):
                return out  # a remoting answer, sent as it is
            request = out.native
            request.opaque = opaque = cmd.opaque
            request.flags = flags = cmd.flags
            if not flags & FLAG_ONEWAY:
                rc._answers[opaque] = out.answer
            if who is None:
                native.dispatch(rc, request)
                return None
            # the native interceptors run inside dispatch(), synchronously: the key is theirs only now
            rc.authenticated_as = who
            try:
                native.dispatch(rc, request)
            finally:
                rc.authenticated_as = None
            return None

        return handle

    def table(self, translators: dict[int, Translator]) -> dict[int, Handler]:
        return {code: self.handler(t) for code, t in translators.items()}
