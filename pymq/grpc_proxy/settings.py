"""The front end's own settings, and the effective settings it answers a client's Telemetry settings with.

:class:`ProxySettings` holds what the front end tells clients (batch size, long polling, body limit,
delivery attempts) and its own limits; :func:`effective_settings` fills those server-side values into
the settings a client sent.
"""

from __future__ import annotations

from pymq.grpc_proxy import mapping
from pymq.grpc_proxy.pb import definition_pb2 as pb


class ProxySettings:
    """What the front end tells clients in Telemetry settings, and its own limits."""

    def __init__(
        self,
        *,
        max_body_size: int = 4 * 1024 * 1024,
        receive_batch_size: int = 32,
        long_polling_ms: int = 20_000,
        default_invisible_ms: int = 30_000,
        max_delivery_attempts: int = 17,
        client_expiry_s: float = 60.0,
        topic_config_ttl_s: float = 10.0,
        unset_message_type_is_normal: bool = False,
    ) -> None:
        self.max_body_size = max_body_size
        self.receive_batch_size = receive_batch_size
        self.long_polling_ms = long_polling_ms
        self.default_invisible_ms = default_invisible_ms
        self.max_delivery_attempts = max_delivery_attempts
        #: a 5.x client silent this long is unregistered from the brokers (under their 120 s channel expiry)
        self.client_expiry_s = client_expiry_s
        #: how long a topic's message.type attribute is trusted before it is read again
        self.topic_config_ttl_s = topic_config_ttl_s
        #: RocketMQ's rule for a topic without message.type (NORMAL only); pymq's default accepts every type
        self.unset_message_type_is_normal = unset_message_type_is_normal


def effective_settings(settings: ProxySettings, asked: pb.Settings) -> pb.Settings:
    """The client's settings with the server-side values filled in (backoff, batch size, polling, body limit)."""
    out = pb.Settings()
    out.CopyFrom(asked)
    s = settings
    if asked.client_type == pb.PRODUCER:
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=3,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=mapping.duration(10), max=mapping.duration(1000), multiplier=2.0
                ),
            )
        )
        out.publishing.max_body_size = s.max_body_size
        out.publishing.validate_message_type = True
    else:
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=s.max_delivery_attempts,
                customized_backoff=pb.CustomizedBackoff(next=[mapping.duration(1000), mapping.duration(5000)]),
            )
        )
        out.subscription.receive_batch_size = s.receive_batch_size
        out.subscription.long_polling_timeout.CopyFrom(mapping.duration(s.long_polling_ms))
        out.subscription.fifo = False
    return out
