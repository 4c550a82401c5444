"""The daemons' listener codec: pymq's frames and RocketMQ 4.x remoting on one port (issue 30).

The one transport module that names a second wire format: it only composes
:mod:`pymq.transport.sniffing` with :mod:`pymq.remoting`'s sniffer and per-connection codec.
A RocketMQ frame's fifth byte is its serialize type and a JSON header starts with ``{``;
pymq's header length never reaches 2^24 and its msgpack header never starts with ``{``, so
the first nine bytes tell them apart (:func:`pymq.remoting.command.sniff`).
"""

from __future__ import annotations

from pymq.remoting.command import sniff
from pymq.remoting.wire import RemotingWire
from pymq.transport.codec import DEFAULT_MAX_FRAME_SIZE, default_codec
from pymq.transport.dispatch import Dispatcher
from pymq.transport.sniffing import Alternative, SniffingCodec

#: the protocol name a remoting connection gets in its channel's ``attrs["protocol"]``
REMOTING = "remoting"


def shared_port_codec(remoting: Dispatcher, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> SniffingCodec:
    """pymq's frames, or RocketMQ remoting answered by ``remoting``, whichever a connection speaks."""
    return SniffingCodec(
        default_codec(max_frame_size),
        {REMOTING: Alternative(lambda: RemotingWire(max_frame_size), remoting)},
        sniff,
    )
