"""The ACL model (permissions, white addresses, file parsing) and its interceptor, without sockets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import encode_body
from pymq.security.acl import ANY, DENY, PUB, SUB, AclFileError, address_matcher, allows, load_acl, parse_acl
from pymq.security.interceptor import AclInterceptor
from pymq.security.permissions import REQUIREMENTS, ResourceNotFound, requirement
from pymq.security.signing import Credentials, sign
from pymq.testing import capture_logs

ACL_TOML = """
global_white_remote_addresses = ["10.9.*"]

[[accounts]]
access_key = "app"
secret_key = "app-secret"
default_topic_perm = "DENY"
default_group_perm = "SUB"
topic_perms = { orders = "PUB|SUB", audit = "SUB", blocked = "DENY" }
group_perms = ["billing=SUB", "nosy=DENY"]

[[accounts]]
access_key = "ops"
secret_key = "ops-secret"
admin = true
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"

[[accounts]]
access_key = "lan"
secret_key = "lan-secret"
white_remote_address = "192.168.1.{5,6}"
"""
NOW = 1_700_000_000_000


class FakeChannel:
    def __init__(self, addr: str = "127.0.0.1:5555") -> None:
        self.remote_addr = addr
        self.attrs: dict[str, Any] = {}


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    p = tmp_path / "acl.toml"
    p.write_text(ACL_TOML)
    return p


@pytest.fixture
def interceptor(acl_file: Path) -> AclInterceptor:
    clock = {"ms": NOW, "mono": 0.0}
    return AclInterceptor(acl_file, replay_window_seconds=60, now_ms=lambda: clock["ms"], monotonic=lambda: 0.0)


def request(
    code: int, ext: dict[str, Any], body: bytes = b"", *, creds: Credentials | None, opaque: int = 1
) -> Command:
    cmd = Command(int(code), opaque, 0, None, dict(ext), body)
    if creds is not None:
        sign(cmd, creds, NOW)
    return cmd


APP = Credentials("app", "app-secret")
OPS = Credentials("ops", "ops-secret")
STRANGER = Credentials("who", "whatever")
GUESSER = Credentials("app", "guessed")


def answer(icp: AclInterceptor, cmd: Command, addr: str = "127.0.0.1:5555") -> tuple[int, str | None] | None:
    resp = icp.before(cmd, FakeChannel(addr))  # type: ignore[arg-type]
    return None if resp is None else (resp.code, resp.remark)


def test_permission_rules_follow_rocketmq() -> None:
    assert allows(PUB, PUB | SUB) and allows(SUB, SUB) and not allows(PUB, SUB)
    assert allows(ANY, SUB) and allows(ANY, PUB) and not allows(ANY, DENY)
    assert not allows(SUB, DENY | SUB)


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4"], []),
        ("192.168.0.*", ["192.168.0.9"], ["192.168.1.9"]),
        ("192.168.*", ["192.168.7.9"], ["192.169.0.1"]),
        ("10.0.0.1-5", ["10.0.0.1", "10.0.0.5"], ["10.0.0.6"]),
        ("10.0.0.{1,3}", ["10.0.0.3"], ["10.0.0.2"]),
        ("10.0.0.0/8", ["10.200.1.1"], ["11.0.0.1", "not-an-ip"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ],
)
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    match = address_matcher(pattern, "t")
    assert all(match(ip) for ip in yes)
    assert not any(match(ip) for ip in no)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"accounts": [{"access_key": "a"}]}, "access_key and secret_key"),
        ({"accounts": [{"access_key": "a", "secret_key": "123"}]}, "at least 6"),
        ({"accounts": [{"access_key": "a", "secret_key": "123456", "topic_perms": {"t": "READ"}}]}, "topic_perms.t"),
        ({"accounts": [{"access_key": "a", "secret_key": "123456", "admn": True}]}, "unknown key"),
        ({"global_white_remote_addresses": ["300.x"]}, "bad address"),
        ({"acounts": []}, "unknown key"),
    ],
)
def test_bad_acl_data_names_the_entry(data: dict[str, Any], message: str) -> None:
    with pytest.raises(AclFileError, match=message):
        parse_acl(data)


def test_load_acl_file(acl_file: Path, tmp_path: Path) -> None:
    acl = load_acl(acl_file)
    assert set(acl.accounts) == {"app", "ops", "lan"}
    assert acl.accounts["app"].group_perm("nosy") == DENY and acl.accounts["app"].group_perm("x") == SUB
    assert "app-secret" not in repr(acl.accounts["app"])
    with pytest.raises(AclFileError, match="not valid TOML"):
        bad = tmp_path / "bad.toml"
        bad.write_text("accounts = [")
        load_acl(bad)
    with pytest.raises(AclFileError, match="not found"):
        load_acl(tmp_path / "missing.toml")


def test_every_request_code_has_a_requirement() -> None:
    """A new request code must be placed in the table deliberately (unlisted codes need admin)."""
    missing = [c.name for c in RequestCode if c not in REQUIREMENTS and c not in _PUSHED_TO_CLIENTS]
    assert missing == []
    assert requirement(123456).admin


_PUSHED_TO_CLIENTS = {
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
    RequestCode.CHECK_TRANSACTION_STATE,
}


def test_signed_permitted_requests_pass(interceptor: AclInterceptor) -> None:
    send = request(RequestCode.SEND_MESSAGE, {"topic": "orders", "queueId": 0}, b"x", creds=APP)
    assert answer(interceptor, send) is None
    pull = request(
        RequestCode.PULL_MESSAGE, {"topic": "audit", "consumerGroup": "billing", "queueId": 0}, creds=APP, opaque=2
    )
    assert answer(interceptor, pull) is None
    retry = request(RequestCode.SEND_MESSAGE, {"topic": "%RETRY%billing"}, b"x", creds=APP, opaque=3)
    assert answer(interceptor, retry) is None  # retry topics are their group's SUB
    create = request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "new"}, creds=OPS)
    assert answer(interceptor, create) is None


@pytest.mark.parametrize(
    ("cmd", "remark"),
    [
        (request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, creds=None), "request not signed"),
        (request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, creds=STRANGER), "bad credentials"),
        (request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, creds=GUESSER), "bad credentials"),
        (request(RequestCode.SEND_MESSAGE, {"topic": "audit"}, creds=APP), "no PUB permission on topic audit"),
        (request(RequestCode.SEND_MESSAGE, {"topic": "other"}, creds=APP), "no PUB permission on topic other"),
        (request(RequestCode.PULL_MESSAGE, {"topic": "orders", "consumerGroup": "nosy"}, creds=APP), "on group nosy"),
        (request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "blocked"}, creds=APP), "topic blocked"),
        (request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "orders"}, creds=APP), "admin permission required"),
        (request(RequestCode.REGISTER_BROKER, {"brokerAddr": "x"}, creds=APP), "admin permission required"),
        (request(9999, {}, creds=APP), "admin permission required"),
    ],
)
def test_refusals_answer_no_permission_with_a_short_reason(
    interceptor: AclInterceptor, cmd: Command, remark: str
) -> None:
    with capture_logs() as logs:
        result = answer(interceptor, cmd)
    assert result is not None
    code, text = result
    assert code == ResponseCode.NO_PERMISSION and text is not None and remark in text
    assert "secret" not in text and "ops" not in text  # nothing about other accounts or secrets
    assert len([r for r in logs if r.get("event", "").startswith("acl_refused")]) == 1


def test_end_transaction_needs_pub_on_the_topic_it_names(interceptor: AclInterceptor) -> None:
    """RocketMQ 5 checks PUB on END_TRANSACTION's topic; under ACL the request must name it (else
    anyone signed could end a half message of a topic it may not write)."""
    ext = {"producerGroup": "pg", "tranStateTableOffset": 0, "commitLogOffset": 0, "commitOrRollback": 8}
    end = RequestCode.END_TRANSACTION
    assert answer(interceptor, request(end, {**ext, "topic": "orders"}, creds=APP)) is None
    refused = answer(interceptor, request(end, {**ext, "topic": "audit"}, creds=APP, opaque=2))
    assert refused == (ResponseCode.NO_PERMISSION, "no PUB permission on topic audit")
    refused = answer(interceptor, request(end, ext, creds=APP, opaque=3))
    assert refused == (ResponseCode.NO_PERMISSION, "request names no topic (END_TRANSACTION needs it under ACL)")


def test_end_transaction_without_topic_is_checked_on_the_topic_its_resolver_finds(acl_file: Path) -> None:
    """A server's resolver finds the topic an END_TRANSACTION left out (the broker: its half message's);
    it is asked only then, and a resolver that finds nothing refuses the request."""
    asked: list[int] = []
    halves = {100: "orders", 200: "audit"}

    def half_topic(cmd: Command) -> str:
        asked.append(cmd.opaque)
        offset = int(cmd.ext["commitLogOffset"])  # as the broker's parses the header
        if offset not in halves:
            raise ResourceNotFound(f"no half message at commitlog offset {offset}")
        return halves[offset]

    icp = AclInterceptor(
        acl_file, now_ms=lambda: NOW, monotonic=lambda: 0.0, resolvers={RequestCode.END_TRANSACTION: half_topic}
    )
    end = RequestCode.END_TRANSACTION
    ext = {"producerGroup": "pg", "tranStateTableOffset": 0, "commitOrRollback": 8}
    assert answer(icp, request(end, {**ext, "commitLogOffset": 100}, creds=APP, opaque=1)) is None
    refused = answer(icp, request(end, {**ext, "commitLogOffset": 200}, creds=APP, opaque=2))
    assert refused == (ResponseCode.NO_PERMISSION, "no PUB permission on topic audit")
    with capture_logs() as logs:
        refused = answer(icp, request(end, {**ext, "commitLogOffset": 300}, creds=APP, opaque=3))
    assert refused == (ResponseCode.NO_PERMISSION, "no half message at commitlog offset 300")
    assert [r["event"] for r in logs if r.get("event", "").startswith("acl_refused")] == ["acl_refused_unresolved"]
    assert asked == [1, 2, 3]
    # a request naming its topic keeps today's check (the resolver is not asked), as do other codes
    named = request(end, {**ext, "commitLogOffset": 200, "topic": "orders"}, creds=APP, opaque=4)
    assert answer(icp, named) is None
    assert answer(icp, request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, b"x", creds=APP, opaque=5)) is None
    assert asked == [1, 2, 3]
    # the resolver's own failures are refusals too, never a crash
    broken = request(end, {**ext, "commitLogOffset": "x"}, creds=APP, opaque=6)
    assert answer(icp, broken) == (ResponseCode.NO_PERMISSION, "malformed request")
    assert icp.refused == 3


def test_heartbeat_checks_consumer_groups_and_topics(interceptor: AclInterceptor) -> None:
    def hb(group: str, topic: str, opaque: int) -> Command:
        body = encode_body(
            {"clientID": "c", "consumerDataSet": [{"groupName": group, "subscriptionDataSet": [{"topic": topic}]}]}
        )
        return request(RequestCode.HEART_BEAT, {}, body, creds=APP, opaque=opaque)

    assert answer(interceptor, hb("billing", "orders", 1)) is None
    refused = answer(interceptor, hb("billing", "other", 2))
    assert refused is not None and "topic other" in (refused[1] or "")
    refused = answer(interceptor, hb("nosy", "orders", 3))
    assert refused is not None and "group nosy" in (refused[1] or "")


def test_replayed_and_expired_requests_are_refused(acl_file: Path) -> None:
    clock = {"ms": NOW}
    icp = AclInterceptor(acl_file, replay_window_seconds=30, now_ms=lambda: clock["ms"], monotonic=lambda: 0.0)
    cmd = request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, b"x", creds=APP)
    assert answer(icp, cmd) is None
    assert answer(icp, cmd) == (ResponseCode.NO_PERMISSION, "replayed request")
    clock["ms"] = NOW + 31_000
    late = request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, b"x", creds=APP, opaque=9)
    assert answer(icp, late) == (ResponseCode.NO_PERMISSION, "request timestamp outside the allowed window")


def test_white_addresses_skip_signatures(interceptor: AclInterceptor) -> None:
    unsigned = request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}, creds=None)
    assert answer(interceptor, unsigned, "10.9.1.1:4000") is None  # global white list
    lan = request(RequestCode.SEND_MESSAGE, {"topic": "x", "AccessKey": "lan"}, creds=None)
    assert answer(interceptor, lan, "192.168.1.5:4000") is None  # the account's white address
    refused = answer(interceptor, lan, "192.168.1.7:4000")
    assert refused is not None and refused[0] == ResponseCode.NO_PERMISSION


def test_hot_reload_swaps_rules_and_keeps_them_on_a_bad_file(acl_file: Path, interceptor: AclInterceptor) -> None:
    assert not interceptor.reload_now()  # unchanged
    acl_file.write_text(ACL_TOML.replace('audit = "SUB"', 'audit = "PUB"'))
    os.utime(acl_file, ns=(1, 2_000_000_000_000_000_000))
    assert interceptor.reload_now()
    send = request(RequestCode.SEND_MESSAGE, {"topic": "audit"}, b"x", creds=APP, opaque=50)
    assert answer(interceptor, send) is None
    acl_file.write_text("accounts = [")
    os.utime(acl_file, ns=(1, 3_000_000_000_000_000_000))
    with capture_logs() as logs:
        assert not interceptor.reload_now()
    assert any(r.get("event") == "acl_reload_failed_keeping_previous_rules" for r in logs)
    send = request(RequestCode.SEND_MESSAGE, {"topic": "audit"}, b"x", creds=APP, opaque=51)
    assert answer(interceptor, send) is None  # old rules still in force


def test_hostile_signing_fields_and_bodies_are_refused_not_crashed(interceptor: AclInterceptor) -> None:
    odd_sig = request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, b"x", creds=APP, opaque=70)
    odd_sig.ext["Signature"] = "é-not-base64"
    assert answer(interceptor, odd_sig) == (ResponseCode.NO_PERMISSION, "bad credentials")
    odd_key = request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, b"x", creds=APP, opaque=71)
    odd_key.ext[5] = "int key"  # type: ignore[index]
    assert answer(interceptor, odd_key) == (ResponseCode.NO_PERMISSION, "bad credentials")
    for ts in (1.5, True, "soon", 2**80):
        bad_ts = request(RequestCode.SEND_MESSAGE, {"topic": "orders"}, b"x", creds=APP, opaque=72)
        bad_ts.ext["Timestamp"] = ts
        refused = answer(interceptor, bad_ts)
        assert refused is not None and refused[0] == ResponseCode.NO_PERMISSION


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1 not msgpack",
        encode_body([1, 2]),
        encode_body({"clientID": "c", "consumerDataSet": 5}),
        encode_body({"clientID": "c", "consumerDataSet": [{"groupName": "billing", "subscriptionDataSet": 7}]}),
        # an allowed group first, then an entry the check cannot read: nothing of it may be acted on
        encode_body({"clientID": "c", "consumerDataSet": [{"groupName": "billing"}, "junk"]}),
    ],
)
def test_heartbeat_bodies_the_check_cannot_read_are_refused(interceptor: AclInterceptor, body: bytes) -> None:
    hb = request(RequestCode.HEART_BEAT, {}, body, creds=APP, opaque=80)
    refused = answer(interceptor, hb)
    assert refused is not None and refused[0] == ResponseCode.NO_PERMISSION
    assert (refused[1] or "").startswith("request body not understood")


@pytest.mark.parametrize("code", [RequestCode.QUERY_QUEUE_OFFSETS, RequestCode.WAIT_QUEUE_ARRIVAL])
def test_many_queue_requests_need_sub_on_every_topic_they_name(interceptor: AclInterceptor, code: int) -> None:
    """Issue 36's batch requests name their topics in the body: each one is checked, as a pull's."""
    from pymq.protocol.requests_many import queues_body

    width = 3 if code == RequestCode.WAIT_QUEUE_ARRIVAL else 2
    ok = queues_body([("orders", 0, 5)[:width], ("audit", 3, 0)[:width]])
    assert answer(interceptor, request(code, {"consumerGroup": "billing"}, ok, creds=APP)) is None
    one_blocked = queues_body([("orders", 0, 5)[:width], ("blocked", 1, 0)[:width]])
    refused = answer(interceptor, request(code, {"consumerGroup": "billing"}, one_blocked, creds=APP, opaque=2))
    assert refused == (ResponseCode.NO_PERMISSION, "no SUB permission on topic blocked")
    refused = answer(interceptor, request(code, {"consumerGroup": "nosy"}, ok, creds=APP, opaque=3))
    assert refused is not None and "on group nosy" in str(refused[1])
    unreadable = answer(interceptor, request(code, {"consumerGroup": "billing"}, b"\xc1", creds=APP, opaque=4))
    assert unreadable is not None and unreadable[0] != ResponseCode.SUCCESS
    no_group = answer(interceptor, request(code, {}, ok, creds=APP, opaque=5))
    assert no_group is not None and no_group[0] != ResponseCode.SUCCESS


def test_describe_lists_rights_and_never_a_secret() -> None:
    """GET_ACL_ACCOUNTS' body (the dashboard's ACL page): each account's rights, no secret key."""
    import tomllib

    from pymq.security.acl import parse_acl
    from tests.acl_accounts import account, acl_toml

    text = acl_toml(account("app", topic_perms={"orders": "PUB"}, group_perms={"g": "DENY"}, default_group_perm="SUB"))
    described = parse_acl(tomllib.loads(text)).describe()
    assert [a["accessKey"] for a in described] == ["app", "broker"]
    assert described[0] == {
        "accessKey": "app",
        "admin": False,
        "defaultTopicPerm": "DENY",
        "defaultGroupPerm": "SUB",
        "topicPerms": {"orders": "PUB"},
        "groupPerms": {"g": "DENY"},
        "whiteRemoteAddresses": 0,
        "whiteRemoteAddress": [],
    }
    assert described[1]["admin"] is True and described[1]["defaultTopicPerm"] == "PUB|SUB"
    assert "secret" not in repr(described)
