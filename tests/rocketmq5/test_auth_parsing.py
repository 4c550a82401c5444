"""pymq.grpc_proxy.auth without sockets: the header's form, the signature, needs, and the daemon's [acl] wiring."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.config import ProxyConfig
from pymq.errors import ConfigError
from pymq.grpc_proxy import GrpcProxy
from pymq.grpc_proxy.app import ProxyApp
from pymq.grpc_proxy.auth import needs, parse_authorization, peer_ip, settings_needs, sign
from pymq.grpc_proxy.pb import definition_pb2 as pb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.security.acl import ANY, PUB, SUB


def test_signature_is_hex_hmac_sha1_of_the_date_time() -> None:
    # RFC 2202 test case 2: HMAC-SHA1("Jefe", "what do ya want for nothing?")
    assert sign("Jefe", "what do ya want for nothing?") == "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"


def test_authorization_header_form() -> None:
    value = "MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature=00ff"
    assert parse_authorization(value) == ("app", ["x-mq-date-time"], "00ff")
    for bad in ("Basic abc", "MQv2-HMAC-SHA1 Credential=app, Signature=00", "MQv2-HMAC-SHA1"):
        with pytest.raises(ValueError):
            parse_authorization(bad)


def test_peer_ips_and_needs() -> None:
    assert peer_ip("ipv4:10.1.2.3:5555") == "10.1.2.3"
    assert peer_ip("ipv6:[::1]:5555") == "::1"
    topic, group = pb.Resource(name="t"), pb.Resource(name="g")
    assert needs("QueryRoute", spb.QueryRouteRequest(topic=topic)) == [("topic", "t", ANY)]
    send = spb.SendMessageRequest(messages=[pb.Message(topic=topic), pb.Message(topic=pb.Resource(name="u"))])
    assert needs("SendMessage", send) == [("topic", "t", PUB), ("topic", "u", PUB)]
    ack = spb.AckMessageRequest(topic=topic, group=group)
    assert needs("AckMessage", ack) == [("topic", "t", SUB), ("group", "g", SUB)]
    assert needs("Heartbeat", spb.HeartbeatRequest(client_type=pb.PRODUCER, group=group)) == []
    assert needs("Heartbeat", spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=group)) == [
        ("group", "g", SUB)
    ]
    producer = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[topic]))
    assert settings_needs(producer) == [("topic", "t", PUB)]
    consumer = pb.Settings(
        client_type=pb.PUSH_CONSUMER,
        subscription=pb.Subscription(group=group, subscriptions=[pb.SubscriptionEntry(topic=topic)]),
    )
    assert settings_needs(consumer) == [("group", "g", SUB), ("topic", "t", SUB)]


def test_pymq_proxy_acl_settings_reach_the_front_end(tmp_path: Path) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text('[[accounts]]\naccess_key = "app"\nsecret_key = "app-secret-1"\n')
    on = ProxyApp(ProxyConfig(acl={"enable": True, "file": acl, "access_key": "proxy", "secret_key": "proxy-secret"}))
    assert on.proxy.acl is not None and set(on.proxy.acl.acl.accounts) == {"app"}
    assert on.proxy._client_options == {"access_key": "proxy", "secret_key": "proxy-secret"}
    assert ProxyApp(ProxyConfig()).proxy.acl is None
    strict = ProxyApp(ProxyConfig(unset_message_type_is_normal=True)).proxy.settings
    assert (
        strict.unset_message_type_is_normal and not ProxyApp(ProxyConfig()).proxy.settings.unset_message_type_is_normal
    )
    (tmp_path / "bad.toml").write_text("[[accounts]]\naccess_key = 1\n")
    with pytest.raises(ConfigError):
        GrpcProxy("127.0.0.1:9876", acl_file=tmp_path / "bad.toml")


def test_a_brokers_acl_guards_its_grpc_front_end(tmp_path: Path) -> None:
    from pymq.cli.broker import BrokerWithGrpc
    from pymq.config import BrokerConfig

    acl = tmp_path / "acl.toml"
    acl.write_text('[[accounts]]\naccess_key = "broker"\nsecret_key = "broker-secret"\nadmin = true\n')
    config = BrokerConfig(
        grpc_port=0, acl={"enable": True, "file": acl, "access_key": "broker", "secret_key": "broker-secret"}
    )
    local = BrokerWithGrpc(config, broker=None)
    assert local.proxy.acl is not None and set(local.proxy.acl.acl.accounts) == {"broker"}
    assert local.proxy._client_options == {"access_key": "broker", "secret_key": "broker-secret"}
    assert BrokerWithGrpc(BrokerConfig(grpc_port=0), broker=None).proxy.acl is None
