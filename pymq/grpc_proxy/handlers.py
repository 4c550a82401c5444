"""The gRPC method table of the MessagingService, with request decoding that cannot crash a call.

protoc's generated registration decodes with ``FromString``: a malformed request then fails
inside grpc with a bare INTERNAL status. Here a request that does not decode becomes a
:class:`Malformed` value, and the method answers it with the v2 ``BAD_REQUEST`` status in its
own response type, naming the request type and the decoder's complaint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb

SERVICE = "apache.rocketmq.v2.MessagingService"


class Malformed:
    """A request whose bytes are not a valid protobuf message of the expected type."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.status = mapping.status(pb.BAD_REQUEST, f"malformed {type_name}: {reason}")


def _decoder(cls: Any) -> Callable[[bytes], Any]:
    def decode(raw: bytes) -> Any:
        try:
            return cls.FromString(raw)
        except (DecodeError, ValueError, RuntimeError) as exc:
            return Malformed(cls.DESCRIPTOR.name, str(exc) or type(exc).__name__)

    return decode


#: guard(method, request, context): None to go on, else the status to answer with (ACL; see auth.py)
Guard = Callable[[str, Any, Any], Any]


def _unary(fn: Callable[[Any, Any], Any], req: Any, resp: Any, guard: Guard | None = None) -> grpc.RpcMethodHandler:
    name = fn.__name__

    async def call(request: Any, context: Any) -> Any:
        if isinstance(request, Malformed):
            return resp(status=request.status)
        if guard is not None and (refused := guard(name, request, context)) is not None:
            return resp(status=refused)
        return await fn(request, context)

    return grpc.unary_unary_rpc_method_handler(
        call, request_deserializer=_decoder(req), response_serializer=resp.SerializeToString
    )


def _server_stream(
    fn: Callable[[Any, Any], AsyncIterator[Any]], req: Any, resp: Any, guard: Guard | None = None
) -> grpc.RpcMethodHandler:
    name = fn.__name__

    async def call(request: Any, context: Any) -> AsyncIterator[Any]:
        if isinstance(request, Malformed):
            yield resp(status=request.status)
            return
        if guard is not None and (refused := guard(name, request, context)) is not None:
            yield resp(status=refused)
            return
        async for item in fn(request, context):
            yield item

    return grpc.unary_stream_rpc_method_handler(
        call, request_deserializer=_decoder(req), response_serializer=resp.SerializeToString
    )


def _bidi(fn: Callable[[Any, Any], AsyncIterator[Any]], req: Any, resp: Any) -> grpc.RpcMethodHandler:
    return grpc.stream_stream_rpc_method_handler(
        fn, request_deserializer=_decoder(req), response_serializer=resp.SerializeToString
    )


def generic_handler(service: Any) -> grpc.GenericRpcHandler:
    """The methods pymq serves (the others answer gRPC UNIMPLEMENTED); with the service's ``acl`` set,
    each call is checked by it first (Telemetry checks its own stream and settings)."""
    s = service
    acl = getattr(service, "acl", None)
    g: Guard | None = acl.check if acl is not None else None
    methods = {
        "QueryRoute": _unary(s.QueryRoute, spb.QueryRouteRequest, spb.QueryRouteResponse, g),
        "Heartbeat": _unary(s.Heartbeat, spb.HeartbeatRequest, spb.HeartbeatResponse, g),
        "SendMessage": _unary(s.SendMessage, spb.SendMessageRequest, spb.SendMessageResponse, g),
        "QueryAssignment": _unary(s.QueryAssignment, spb.QueryAssignmentRequest, spb.QueryAssignmentResponse, g),
        "ReceiveMessage": _server_stream(s.ReceiveMessage, spb.ReceiveMessageRequest, spb.ReceiveMessageResponse, g),
        "AckMessage": _unary(s.AckMessage, spb.AckMessageRequest, spb.AckMessageResponse, g),
        "ChangeInvisibleDuration": _unary(
            s.ChangeInvisibleDuration, spb.ChangeInvisibleDurationRequest, spb.ChangeInvisibleDurationResponse, g
        ),
        "NotifyClientTermination": _unary(
            s.NotifyClientTermination, spb.NotifyClientTerminationRequest, spb.NotifyClientTerminationResponse, g
        ),
        "EndTransaction": _unary(s.EndTransaction, spb.EndTransactionRequest, spb.EndTransactionResponse, g),
        "ForwardMessageToDeadLetterQueue": _unary(
            s.ForwardMessageToDeadLetterQueue,
            spb.ForwardMessageToDeadLetterQueueRequest,
            spb.ForwardMessageToDeadLetterQueueResponse,
            g,
        ),
        "Telemetry": _bidi(s.Telemetry, spb.TelemetryCommand, spb.TelemetryCommand),
    }
    return grpc.method_handlers_generic_handler(SERVICE, methods)


__all__ = ["SERVICE", "Malformed", "generic_handler"]
