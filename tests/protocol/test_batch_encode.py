"""The producer's one-pass batch encoder (protocol/batch_encode.py): C and Python give the same bytes,
the bytes are those of the per-message encoder, and ``send_batch`` keeps its checks and errors."""

from __future__ import annotations

import itertools
import os
import time
import types
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymq.client.producer import Producer
from pymq.errors import ClientError, MessageTooLargeError
from pymq.protocol import batch_encode, record
from pymq.protocol.batch_encode import encode_batch, encode_batch_py
from pymq.protocol.message import Message, UniqueIdGenerator, iter_messages
from pymq.protocol.record import pack_host

HOST = pack_host("10.0.0.7", 0)
HEAD = "0A0000070B1A18B4AAC200D2F1A3"  # what UniqueIdGenerator.id_head() gives: 28 hex digits
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def both(messages: Any, *args: Any, start: int = 0) -> tuple[Any, Any, int, int]:
    """The C answer and the Python one, with how far each moved its own counter."""
    c_counter, py_counter = itertools.count(start), itertools.count(start)
    if record.speedups is not None:
        c = record.speedups.encode_batch(messages, *args[:7], c_counter)
    else:  # built without a compiler: the Python body against itself
        c = encode_batch_py(messages, *args[:7], c_counter)
        c = NotImplemented if c is None else c
    py = encode_batch_py(messages, *args[:7], py_counter)
    return c, py, next(c_counter), next(py_counter)


def args_for(topic: str = "orders", *, max_size: int = 4 << 20, threshold: int = 4096, head: str = HEAD) -> tuple:
    return (topic, topic.encode(), 1_764_000_000_123, HOST, max_size, threshold, head)


# --- C against Python -----------------------------------------------------------------------------------------

texts = st.one_of(st.none(), st.just(""), st.text(max_size=6), st.sampled_from(["a\x01", "b\x02", "\ud800", "TagA"]))
messages = st.builds(
    Message,
    topic=st.sampled_from(["orders", "orders", "orders", "other", ""]),
    body=st.one_of(st.binary(max_size=80), st.binary(max_size=3).map(bytearray), st.just(b"x" * 200)),
    tags=texts,
    keys=st.one_of(st.none(), st.just(""), st.just([]), st.just("k1"), st.just(["k1", "k2"])),
    properties=st.one_of(st.just({}), st.just({"a": "b"})),
    flag=st.one_of(st.integers(-(1 << 31), (1 << 31) - 1), st.sampled_from([1 << 31, -(1 << 31) - 1, True])),
    delay_level=st.one_of(st.just(0), st.integers(-3, 3), st.just(False)),
)


@SETTINGS
@given(
    batch=st.lists(messages, max_size=8),
    max_size=st.sampled_from([4 << 20, 150, 400, 1200]),
    threshold=st.sampled_from([4096, 60, 0]),
    head=st.sampled_from([HEAD, "", "é" * 3]),
    start=st.sampled_from([0, 65534, 1 << 70, -5]),
)
def test_c_and_python_agree(batch: list[Message], max_size: int, threshold: int, head: str, start: int) -> None:
    c, py, c_next, py_next = both(batch, *args_for(max_size=max_size, threshold=threshold, head=head), start=start)
    assert (c is NotImplemented) == (py is None)
    if py is not None:
        assert c == py
    assert c_next == py_next  # the same number of ids taken (none when the batch is not plain)


@pytest.mark.parametrize(
    "bad_args",
    [
        ("orders", "orders", 1, HOST, 1 << 20, 4096, HEAD),  # topic not bytes
        ("orders", b"orders", 1.0, HOST, 1 << 20, 4096, HEAD),  # timestamp not an int
        ("orders", b"orders", 1, b"short", 1 << 20, 4096, HEAD),  # host not of 8 bytes
        ("orders", b"orders", 1 << 64, HOST, 1 << 20, 4096, HEAD),  # timestamp too large
        ("orders", b"orders", 1, HOST, 1 << 20, 4096, b"head"),  # head not a str
        ("", b"", 1, HOST, 1 << 20, 4096, HEAD),  # no topic
    ],
)
def test_arguments_outside_the_handled_case_take_nothing(bad_args: tuple) -> None:
    batch = [Message("orders", b"body")]
    c, py, c_next, py_next = both(batch, *bad_args)
    assert c is NotImplemented and py is None and c_next == py_next == 0


def test_a_message_without_the_attributes_is_not_plain() -> None:
    c, py, c_next, _ = both([types.SimpleNamespace(topic="orders", body=b"x")], *args_for())
    assert c is NotImplemented and py is None and c_next == 0


# --- the same bytes as the per-message encoder ------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["speedups", "pure-python"])
@pytest.mark.parametrize("tags", [None, "", "TagA", "ünï"])
def test_the_bytes_are_the_per_message_encoders(impl: str, tags: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain batch encodes to what Producer._encode made for each message, ids included."""
    if impl == "pure-python":
        monkeypatch.setattr(record, "speedups", None)
    monkeypatch.setattr(time, "time", lambda: 1_764_000_000.123)  # ids of one millisecond, both ways
    batch = [Message("orders", os.urandom(100 + i), tags=tags, flag=i) for i in range(70)]

    def producer() -> Producer:
        p = Producer("127.0.0.1:1", max_message_size=1 << 20)
        p._ids = UniqueIdGenerator("10.0.0.7")
        p._ids._prefix = "0A000007" + "0B1A18B4AAC2"  # the same pid and random part for both producers
        p._born_host = HOST
        return p

    fast = producer()
    data, ids = fast._encode_batch(batch, "orders")
    slow = producer()
    old_records, old_ids = zip(*(slow._encode(m, b"orders", 1_764_000_000_123) for m in batch), strict=True)
    assert ids == list(old_ids) and len(set(ids)) == 70
    assert data == b"".join(old_records)
    decoded = list(iter_messages(data))
    assert [m.body for m in decoded] == [m.body for m in batch]
    assert [m.msg_id for m in decoded] == ids
    assert {m.tags for m in decoded} == {tags or None}


def test_ids_are_those_of_next_id() -> None:
    gen = UniqueIdGenerator("10.0.0.7")
    a = gen.next_id()
    head = gen.id_head()
    b = f"{head}{next(gen.counter) & 0xFFFF:04X}"
    c = gen.next_id()
    assert len(head) == 28 and a[:8] == b[:8] == c[:8] == "0A000007"
    assert int(b[-4:], 16) == int(a[-4:], 16) + 1 and int(c[-4:], 16) == int(b[-4:], 16) + 1


# --- send_batch: the same checks and errors -----------------------------------------------------------------


def unstarted_producer(**options: Any) -> Producer:
    """A producer that encodes (its ids are made) but has no connection: errors of the encoding come first."""
    p = Producer("127.0.0.1:1", **options)
    p._ids = UniqueIdGenerator("10.0.0.7")
    return p


@pytest.mark.parametrize("impl", ["speedups", "pure-python"])
@pytest.mark.parametrize(
    ("batch", "error", "text"),
    [
        ([Message("orders", b"a"), Message("other", b"b")], ClientError, "same topic"),
        ([Message("orders", b"a"), Message("orders", b"b", delay_level=2)], ClientError, "cannot be sent in a batch"),
        ([Message("orders", b"a"), Message("orders", b"")], ClientError, "body is empty"),
        ([Message("orders", "text")], ClientError, "must be bytes"),  # type: ignore[arg-type]
        ([Message("", b"a")], ClientError, "topic is empty"),
        ([Message("orders", b"x" * 2000)], MessageTooLargeError, "message body of 2000 bytes"),
        ([Message("orders", b"x" * 1900)], MessageTooLargeError, "encoded message of"),
        ([Message("orders", b"x" * 600) for _ in range(4)], MessageTooLargeError, "send smaller batches"),
        ([Message("orders", b"a", tags="t\x01")], ClientError, "reserved control character"),
    ],
)
async def test_send_batch_errors_are_unchanged(
    impl: str, batch: list[Message], error: type[Exception], text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if impl == "pure-python":
        monkeypatch.setattr(record, "speedups", None)
    p = unstarted_producer(max_message_size=1999, compress_threshold=1 << 20)
    with pytest.raises(error, match=text):
        await p.send_batch(batch)


async def test_a_plain_batch_takes_the_one_pass_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = batch_encode.encode_batch

    def counting(messages: Any, *args: Any) -> Any:
        out = real(messages, *args)
        calls.append(0 if out is None else len(messages))
        return out

    from pymq.client import producer_encoding

    monkeypatch.setattr(producer_encoding, "encode_batch", counting)
    p = unstarted_producer()
    p._encode_batch([Message("orders", b"a", tags="t"), Message("orders", b"b")], "orders")
    p._encode_batch((Message("orders", b"a", keys="k"),), "orders")  # keys: the general path
    assert calls == [2, 0]
    assert encode_batch([Message("orders", b"a")], *args_for(), itertools.count()) is not None


class TaggedMessage(Message):
    """A subclass: the C code reads its fields through getattr, not from Message's slots."""


def test_subclasses_and_plain_messages_encode_alike() -> None:
    """Exact Message instances are read from their slots in C, others by attribute: the same bytes."""
    plain = [Message("orders", b"body %d" % i, tags="t") for i in range(5)]
    sub = [TaggedMessage("orders", b"body %d" % i, tags="t") for i in range(5)]
    mixed = [plain[0], sub[1], plain[2], sub[3], plain[4]]
    answers = [encode_batch(batch, *args_for(), itertools.count()) for batch in (plain, sub, mixed)]
    assert answers[0] is not None and answers[0] == answers[1] == answers[2]
    broken = Message.__new__(Message)  # no field set: the batch is not handled, nothing is taken
    counter = itertools.count()
    assert encode_batch([plain[0], broken], *args_for(), counter) is None and next(counter) == 0
