"""A gRPC front end speaking RocketMQ 5's ``apache.rocketmq.v2.MessagingService``.

A stateless proxy: RocketMQ 5 clients (Java, Go, Python, ...) talk gRPC to it, and it talks
pymq's own RPC to the brokers it finds through the nameservers (through pymq's SDK
internals: route cache, producer, pop/ack requests). Protobuf objects stay at the edge:
:mod:`pymq.grpc_proxy.mapping` turns them into pymq messages and back, the service module
does the I/O. ``pb/`` holds the .proto transcription and its generated code.
"""

from pymq.grpc_proxy.server import GrpcProxy

__all__ = ["GrpcProxy"]
