"""asyncio RPC over framed TCP: connections, server, client, dispatch and flow control."""

from pymq.transport.channel import Channel
from pymq.transport.client import Backoff, RpcClient, split_addr
from pymq.transport.codec import Codec
from pymq.transport.connection import Connection
from pymq.transport.dispatch import Dispatcher, Handler
from pymq.transport.interceptor import Interceptor
from pymq.transport.limits import ConnectionLimits
from pymq.transport.loop import new_event_loop, run
from pymq.transport.server import RpcServer

__all__ = [
    "Backoff",
    "Channel",
    "Codec",
    "Connection",
    "ConnectionLimits",
    "Dispatcher",
    "Handler",
    "Interceptor",
    "RpcClient",
    "RpcServer",
    "new_event_loop",
    "run",
    "split_addr",
]
