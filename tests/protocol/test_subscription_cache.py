"""The brokers' cache of parsed subscriptions (pull and pop handlers): parsed once, bounded."""

from __future__ import annotations

from pymq.protocol.filter import Subscription, SubscriptionCache


def test_an_expression_is_parsed_once_and_none_is_everything() -> None:
    cache = SubscriptionCache()
    sub = cache.get("t", "a || b")
    assert sub == Subscription.parse("t", "a || b") and cache.get("t", "a || b") is sub
    assert cache.get("t", None) is cache.get("t", "*") and cache.get("t", None).matches_all
    assert cache.get("u", "a || b") is not sub  # per topic
    assert len(cache) == 3


def test_it_is_emptied_past_its_limit() -> None:
    cache = SubscriptionCache(limit=3)
    for i in range(4):
        cache.get("t", f"tag{i}")
    assert len(cache) == 4
    cache.get("t", "one more")
    assert len(cache) == 1
