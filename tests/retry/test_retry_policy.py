"""The one retry -> dead-letter decision: limits, the count each path passes, origins kept."""

from __future__ import annotations

from pathlib import Path

from pymq.broker.retry.policy import (
    DEFAULT_MAX_RECONSUME_TIMES,
    dead_letter_if_exhausted,
    exhausted,
    keep_origin,
    retry_limit,
)
from pymq.broker.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
from pymq.broker.topics import TopicConfigManager
from pymq.protocol.message import Prop
from pymq.protocol.record import decode_properties, encode_properties, encode_record, parse_record


def test_the_limit_is_the_consumers_then_the_groups_then_the_default() -> None:
    """A consumer's maxReconsumeTimes (>= 0) wins; else the group's retryMaxTimes; else 16."""
    group = SubscriptionGroupConfig("g", retryMaxTimes=3)
    assert retry_limit(group, 5) == 5 and retry_limit(group, 0) == 0
    assert retry_limit(group) == 3 and retry_limit(group, -1) == 3
    assert retry_limit(None) == DEFAULT_MAX_RECONSUME_TIMES == SubscriptionGroupConfig("x").retryMaxTimes == 16


def test_a_message_is_exhausted_once_consumed_the_limit_times() -> None:
    assert not exhausted(2, 3) and exhausted(3, 3) and exhausted(4, 3) and exhausted(0, 0)


def test_origin_is_kept_once() -> None:
    """RETRY_TOPIC is the original topic; the first ORIGIN_MESSAGE_ID stays."""
    props: dict[str, str] = {Prop.ORIGIN_MESSAGE_ID: "first"}
    keep_origin(props, "T", "second")
    assert props == {Prop.ORIGIN_MESSAGE_ID: "first", Prop.RETRY_TOPIC: "T"}
    fresh: dict[str, str] = {}
    keep_origin(fresh, "T", None)
    assert fresh == {Prop.RETRY_TOPIC: "T"}


def _retry(reconsume_times: int, **props: str) -> bytes:
    return encode_record(b"%RETRY%g", b"x", encode_properties(dict(props)), reconsume_times=reconsume_times)


def test_a_client_published_retry_counts_the_increment_it_already_made(tmp_path: Path) -> None:
    """The client sends reconsumeTimes already + 1: with limit 2, count 2 stays a retry, 3 dead-letters."""
    groups = SubscriptionGroupManager(tmp_path / "groups.json")
    groups.upsert(SubscriptionGroupConfig("g", retryMaxTimes=2))
    topics = TopicConfigManager(tmp_path / "topics.json")
    body = _retry(2)
    assert dead_letter_if_exhausted("%RETRY%g", 1, body, groups, topics) == ("%RETRY%g", 1, body)
    topic, qid, stored = dead_letter_if_exhausted("%RETRY%g", 1, _retry(3, DELAY="3"), groups, topics)
    assert (topic, qid) == ("%DLQ%g", 0) and topics.get("%DLQ%g") is not None
    r = parse_record(stored)
    assert r.topic == b"%DLQ%g" and Prop.DELAY not in decode_properties(r.properties)
    # the record's own MAX_RECONSUME_TIMES overrides the group's
    assert dead_letter_if_exhausted("%RETRY%g", 1, _retry(3, MAX_RECONSUME_TIMES="5"), groups, topics)[0] == "%RETRY%g"
