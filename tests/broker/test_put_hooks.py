"""The broker's put path: hooks rewrite a batch into segments, the store gets them in one call."""

from __future__ import annotations

from typing import Any

from pymq.broker.delay.hook import SCHEDULE_TOPIC, DelayHook
from pymq.broker.put_path import PutPath, Segment
from pymq.protocol.record import encode_record, parse_record
from pymq.protocol.record_batch import SplitBatch
from tests.broker.fakes import FakeStore

LEVELS = [1000, 5000, 10000]


def rec(topic: str, body: bytes, props: bytes = b"") -> bytes:
    return encode_record(topic.encode(), body, props)


class Upper:
    """A test hook: moves records whose body starts with b"UP" to topic UPPER, queue 9."""

    def install(self, store: Any) -> None:
        pass

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        return b"UP" in data

    def rewrite(self, topic: str, queue_id: int, data: bytes) -> list[Segment]:
        r = parse_record(data)
        if bytes(r.body).startswith(b"UP") and r.total_size == len(data):
            return [("UPPER", 9, data)]
        return [(topic, queue_id, data)]


def test_a_batch_without_delays_goes_to_the_store_untouched() -> None:
    store = FakeStore()
    path = PutPath(store, [DelayHook(LEVELS)])  # type: ignore[arg-type]
    batch = rec("T", b"a") + rec("T", b"b")
    res = path.put("T", 2, batch)
    assert store.calls == [[("T", 2, batch)]] and store.calls[0][0][2] is batch
    assert [(r.topic, r.queue_id) for r in res] == [("T", 2), ("T", 2)]


def test_a_body_that_looks_like_a_delay_property_is_not_moved() -> None:
    """The hook looks at properties only: DELAY bytes in a body do not make a message delayed."""
    store = FakeStore()
    path = PutPath(store, [DelayHook(LEVELS)])  # type: ignore[arg-type]
    batch = rec("T", b"payload DELAY\x012\x02 in the body")
    res = path.put("T", 1, batch)
    assert store.calls == [[("T", 1, batch)]]
    assert [(r.topic, r.queue_id) for r in res] == [("T", 1)]


def test_the_delay_hook_registers_the_schedule_topic_rule() -> None:
    store = FakeStore()
    hook = DelayHook(LEVELS)
    PutPath(store, [hook])  # type: ignore[arg-type]
    rule = store.rules[SCHEDULE_TOPIC]
    assert rule(b"DELAY\x012\x02", 100) == 5100
    assert rule(b"DELAY\x01x\x02", 100) == 1100 and rule(b"", 100) == 1100  # unreadable: level 1
    assert rule(b"DELAY\x0199\x02", 100) == 10100  # capped at the last level


def test_delayed_records_become_their_own_segments_in_order() -> None:
    store = FakeStore()
    path = PutPath(store, [DelayHook(LEVELS)])  # type: ignore[arg-type]
    a, b, c = rec("T", b"a"), rec("T", b"b"), rec("T", b"c")
    d = rec("T", b"later", b"DELAY\x012\x02")
    res = path.put("T", 0, a + b + d + c)
    (call,) = store.calls
    assert [(t, q) for t, q, _ in call] == [("T", 0), (SCHEDULE_TOPIC, 1), ("T", 0)]
    assert call[0][2] == a + b and call[2][2] == c
    moved = parse_record(call[1][2])
    assert moved.topic == SCHEDULE_TOPIC.encode() and bytes(moved.body) == b"later"
    assert b"REAL_TOPIC\x01T\x02" in moved.properties and b"REAL_QID\x010\x02" in moved.properties
    assert [r.topic for r in res] == ["T", "T", SCHEDULE_TOPIC, "T"]


def test_hooks_chain_over_the_previous_hooks_segments() -> None:
    store = FakeStore()
    path = PutPath(store, [DelayHook(LEVELS), Upper()])  # type: ignore[arg-type]
    batch = rec("T", b"a") + rec("T", b"later", b"DELAY\x011\x02") + rec("T", b"UPx")
    res = path.put("T", 3, batch)
    # The second hook sees the first one's segments: the last record is a segment of its own.
    assert [(t, q) for t, q, _ in store.calls[0]] == [("T", 3), (SCHEDULE_TOPIC, 0), ("UPPER", 9)]
    assert [r.topic for r in res] == ["T", SCHEDULE_TOPIC, "UPPER"]
    res = path.put("T", 3, rec("T", b"UPy"))
    assert store.calls[1] == [("UPPER", 9, rec("T", b"UPy"))] and res[0].topic == "UPPER"


def _needle_hooks() -> list[Any]:
    from pymq.broker.timer.hook import TimerHook
    from pymq.broker.transaction.hook import TransactionHook

    return [TransactionHook(), TimerHook(86_400_000, lambda: 0), DelayHook(LEVELS)]


def test_the_one_scan_answers_what_each_hooks_wants_answers() -> None:
    """Hooks declaring ``property_needles`` are answered by the path's one search: it must agree."""
    hooks = _needle_hooks()
    rewrites: list[str] = []
    for hook in hooks:  # a spy: which hooks the path let rewrite (by either way a hook has)
        hook.rewrite = lambda *seg, _h=hook, _r=hook.rewrite: rewrites.append(type(_h).__name__) or _r(*seg)
        if hasattr(hook, "rewrite_split"):
            hook.rewrite_split = lambda *a, _h=hook, _r=hook.rewrite_split: rewrites.append(type(_h).__name__) or _r(*a)
    path = PutPath(FakeStore(), hooks)  # type: ignore[arg-type]
    props = [
        b"",
        b"UNIQ_KEY\x01ABC\x02TAGS\x01t\x02",
        b"DELAY\x012\x02",
        b"TIMER_DELAY_MS\x01100\x02",
        b"MERGE_WINDOW_MS\x0150\x02MERGE_KEY\x01k\x02",
        b"TRAN_MSG\x01true\x02",
        b"KEYS\x01TIMER\x02",  # near misses: no needle
    ]
    answers = []
    for p in props:
        for body in (b"plain", b"DELAY\x011\x02 TIMER_ TRAN_MSG\x01 in the body"):
            # single records, batches, and a needle only in a record the store refuses (other topic)
            for data in (rec("T", body, p), rec("T", b"x") + rec("T", body, p), rec("T", b"x") + rec("U", body, p)):
                split = FakeStore().split("T", data)
                expected = any(h.wants(data, split) for h in hooks)
                assert path._anyone_wants(data, split) is expected, (p, body, data)
                rewrites.clear()
                path.put("T", 0, data)  # (singles take put's inline copy of the scan)
                assert bool(rewrites) is expected, (p, body, data)
                answers.append(expected)
    assert answers.count(True) == 4 * 2 * 2  # four property sets with needles, two bodies, two valid shapes


def test_hooks_without_needles_are_still_asked_and_hooks_can_be_replaced() -> None:
    store = FakeStore()
    path = PutPath(store, [*_needle_hooks(), Upper()])  # type: ignore[arg-type]
    res = path.put("T", 1, rec("T", b"UPz"))
    assert res[0].topic == "UPPER"
    installed = path.hooks
    path.hooks = installed[:-1]  # without Upper
    res = path.put("T", 1, rec("T", b"UPz"))
    assert res[0].topic == "T"
    res = path.put("T", 1, rec("T", b"later", b"DELAY\x011\x02"))
    assert res[0].topic == SCHEDULE_TOPIC


class Asked(Upper):
    """:class:`Upper` that counts what it is asked."""

    def __init__(self) -> None:
        self.asked = 0

    def wants(self, data: bytes, split: SplitBatch) -> bool:
        self.asked += 1
        return super().wants(data, split)


def test_a_request_moved_entirely_to_settled_topics_skips_the_later_hooks() -> None:
    """The transaction hook's half messages are final (``settled_topics``): no later hook sees them
    (this one would move the first record: its body starts with "UP"); a record left on its topic
    still goes through the later hooks."""
    from pymq.broker.transaction.hook import HALF_TOPIC, TransactionHook

    store = FakeStore()
    later = Asked()
    path = PutPath(store, [TransactionHook(), later])  # type: ignore[arg-type]
    half = rec("T", b"UP but a half message", b"TRAN_MSG\x01true\x02PGROUP\x01g\x02")
    res = path.put("T", 1, half)
    assert [(t, q) for t, q, _ in store.calls[0]] == [(HALF_TOPIC, 0)] and later.asked == 0
    assert [r.topic for r in res] == [HALF_TOPIC]
    res = path.put("T", 1, half + rec("T", b"UPx"))
    assert [(t, q) for t, q, _ in store.calls[1]] == [(HALF_TOPIC, 0), ("UPPER", 9)] and later.asked == 1
    assert [r.topic for r in res] == [HALF_TOPIC, "UPPER"]
