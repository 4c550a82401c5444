"""Pop consumption's pure pieces: receipt handles (signing, tampering) and revive-log records."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymq.broker.pop.receipt import CheckpointAcks, HandleError, HandleSigner, ReceiptHandle
from pymq.broker.pop.records import CheckPoint, ack_record, acks_record, parse_ack, revive_queue_of
from pymq.protocol.record import parse_record

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLE = ReceiptHandle("g", "t", 3, 41, 123456, 2, 1_700_000_000_000, 30_000, 5)


def test_handle_round_trips_and_is_signed(tmp_path: Path) -> None:
    signer = HandleSigner.from_store(tmp_path / "config")
    text = signer.encode(HANDLE)
    assert signer.decode(text) == HANDLE
    assert HANDLE.deadline == 1_700_000_030_000
    # the same store dir gives the same secret (handles survive a restart); another store does not verify
    assert HandleSigner.from_store(tmp_path / "config").decode(text) == HANDLE
    assert (tmp_path / "config" / "pop.secret").stat().st_mode & 0o777 == 0o600
    with pytest.raises(HandleError):
        HandleSigner.from_store(tmp_path / "other").decode(text)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: "",
        lambda t: "no-such-handle",
        lambda t: t + "x",
        lambda t: t[:10] + ("A" if t[10] != "A" else "B") + t[11:],
        lambda t: t[:30] + ("A" if t[30] != "A" else "B") + t[31:],
        lambda t: "A" + t,
        lambda t: t[:-3],
        lambda t: t + "!!!",
        lambda t: t[22:] + t[:22],
    ],
)
def test_tampered_handles_refused(tmp_path: Path, mangle) -> None:
    signer = HandleSigner(b"k" * 32)
    with pytest.raises(HandleError):
        signer.decode(mangle(signer.encode(HANDLE)))


def test_a_slave_adopts_its_masters_secret_and_keeps_it(tmp_path: Path) -> None:
    """Issue 32: a promoted slave verifies the handles its old master issued once it took the secret."""
    master = HandleSigner.from_store(tmp_path / "m")
    slave = HandleSigner.from_store(tmp_path / "s")
    text = master.encode(HANDLE)
    with pytest.raises(HandleError):
        slave.decode(text)
    assert slave.adopt(master.secret, tmp_path / "s") is True
    assert slave.adopt(master.secret, tmp_path / "s") is False  # already the group's
    assert slave.decode(text) == HANDLE
    assert HandleSigner.from_store(tmp_path / "s").decode(text) == HANDLE  # kept across a restart
    assert (tmp_path / "s" / "pop.secret").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError, match=r"16\.\.64 bytes"):
        slave.adopt(b"short", tmp_path / "s")
    assert slave.decode(text) == HANDLE


def test_checkpoint_and_ack_records() -> None:
    ck = CheckPoint("g", "t", 1, array("q", [4, 5, 9]), 10, 1000, 500)
    r = parse_record(ck.to_record("rmq_sys_REVIVE_LOG_c"))
    assert r.topic == b"rmq_sys_REVIVE_LOG_c"
    back = CheckPoint.from_body(r.body)
    assert (back.group, back.topic, back.queue_id, back.offsets.tolist(), back.next_offset) == (
        "g",
        "t",
        1,
        [4, 5, 9],
        10,
    )
    assert back.revive_time == 1500 and back.unacked() == [0, 1, 2] and not back.all_acked
    back.acked = 0b111
    assert back.all_acked and back.unacked() == []
    a = parse_record(ack_record("rmq_sys_REVIVE_LOG_c", 777, [0, 2], 1))
    assert parse_ack(a.body) == [(777, [0, 2])]
    # the acks of several checkpoints (of one revive queue) in one record
    many = parse_record(acks_record("rmq_sys_REVIVE_LOG_c", [(777, [0, 2]), (900, [5]), (901, [])], 1))
    assert bytes(many.body) == b'{"ck":[777,900,901],"i":[[0,2],[5],[]]}'
    assert parse_ack(many.body) == [(777, [0, 2]), (900, [5]), (901, [])]
    assert parse_record(acks_record("r", [(777, [0, 2])], 1)).body == a.body  # one checkpoint: the old form
    for bad in (
        b'{"ck":[1,2],"i":[[0]]}',
        b'{"ck":[1],"i":[0]}',
        b'{"ck":["x"],"i":[[0]]}',
        b'{"ck":[1],"i":[[null]]}',
    ):
        with pytest.raises((ValueError, KeyError, TypeError)):
            parse_ack(bad)
    assert all(0 <= revive_queue_of(g, "t", 8) < 8 for g in "abcdefgh")


#: (group, topic) whose revive queues (of 8) are compared across processes
REVIVE_KEYS = [("g", t) for t in "tuvw"] + [("orders-group", "orders"), ("%RETRY%g", "t"), ("é", "ü")]


def test_revive_queue_of_is_stable_across_processes() -> None:
    """A checkpoint's revive queue survives a restart: the same in processes with different hash seeds.

    A broker restarted with another PYTHONHASHSEED must look for a checkpoint in the queue it was
    written to; ``hash()`` of a str would move it, crc32 does not.
    """
    code = (
        "import sys; from pymq.broker.pop.records import revive_queue_of;"
        f"print(','.join(str(revive_queue_of(g, t, 8)) for g, t in {REVIVE_KEYS!r}))"
    )
    outputs = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        outputs.add(out)
    expected = ",".join(str(zlib.crc32(f"{g}@{t}".encode()) % 8) for g, t in REVIVE_KEYS)
    assert outputs == {expected}
    assert ",".join(str(revive_queue_of(g, t, 8)) for g, t in REVIVE_KEYS) == expected  # and this process


def test_one_signature_per_checkpoint_and_version_1_handles_still_read(tmp_path: Path) -> None:
    signer = HandleSigner(b"k" * 32)
    part = signer.checkpoint_part("g", "t", 3, 123456, 1_700_000_000_000, 30_000, 5)
    # the handles of one popped batch share the signed checkpoint part; index and offset follow it
    assert signer.encode(HANDLE) == f"{part}.2.41"
    assert signer.decode(f"{part}.2.41") == HANDLE
    assert signer.decode(f"{part}.0.40") == ReceiptHandle("g", "t", 3, 40, 123456, 0, 1_700_000_000_000, 30_000, 5)
    for bad in (
        f"{part}.2",
        f"{part}.2.41.1",
        f"{part}.-2.41",
        f"{part}.2.+41",
        f"{part}.2_0.41",
        f"{part}..41",
        f"{part}.2." + "9" * 5000,
    ):
        with pytest.raises(HandleError):
            signer.decode(bad)
    # handles issued by an earlier version (one MAC over every field) stay valid
    v1 = signer.encode_v1(HANDLE)
    assert "." not in v1 and signer.decode(v1) == HANDLE
    with pytest.raises(HandleError):
        HandleSigner(b"j" * 32).decode(v1)


def _batch_handles() -> list[str]:
    """Handles a batch ack may carry: two checkpoints' (version 2), a version 1 one, a forged part
    and malformed ones (signs, non-ASCII digits, too long, a newline that could fake a line)."""
    signer = HandleSigner(b"k" * 32)
    a = signer.checkpoint_part("g", "t", 3, 100, 1_700_000_000_000, 30_000, 5)
    b = signer.checkpoint_part("g", "t%", 1, 200, 1_700_000_000_001, 60_000, 2)
    forged = HandleSigner(b"j" * 32).checkpoint_part("g", "t", 3, 100, 1_700_000_000_000, 30_000, 5)
    return [
        *(f"{a}.{i}.{40 + i}" for i in range(4)),
        *(f"{b}.{i}.{7 + i}" for i in range(3)),
        f"{a}.0012.0052",
        signer.encode_v1(HANDLE),
        f"{forged}.0.40",
        f"{a}.+1.41",
        f"{a}.\uff11.41",
        f"{a}.1.4\n{a}.2.42",
        f"{a}.1." + "9" * 20,
        "x.y",
        "",
    ]


BATCH_HANDLES = _batch_handles()


def _per_position(grouped: tuple[list[CheckpointAcks], dict[int, HandleError]]) -> dict[int, object]:
    groups, errors = grouped
    out: dict[int, object] = {pos: ("refused", str(exc)) for pos, exc in errors.items()}
    for g in groups:
        fields = (g.group, g.topic, g.queue_id, g.ck_offset, g.pop_time, g.invisible_ms, g.revive_qid)
        for pos, index, offset in zip(g.positions, g.indexes, g.queue_offsets, strict=True):
            assert pos not in out
            out[pos] = (*fields, index, offset)
    return out


@settings(max_examples=300, deadline=None)
# any handles (mostly one by one), or only well-formed ones, 8 or more (the runs path, in or out of runs)
@given(
    st.one_of(
        st.lists(st.sampled_from(BATCH_HANDLES), min_size=1, max_size=40),
        st.lists(st.sampled_from(BATCH_HANDLES[:8]), min_size=8, max_size=40),
    )
)
def test_a_batch_ack_groups_its_handles_as_one_by_one_decoding_does(texts: list[str]) -> None:
    """Grouping a batch's handles by checkpoint (at once for the usual batch, else handle by handle)
    gives every handle what decoding it alone gives: its fields, or its refusal."""
    signer = HandleSigner(b"k" * 32)
    expected: dict[int, object] = {}
    for pos, text in enumerate(texts):
        try:
            h = signer.decode(text)
        except HandleError as exc:
            expected[pos] = ("refused", str(exc))
        else:
            fields = (h.group, h.topic, h.queue_id, h.ck_offset, h.pop_time, h.invisible_ms, h.revive_qid)
            expected[pos] = (*fields, h.index, h.queue_offset)
    assert _per_position(HandleSigner(b"k" * 32).group_by_checkpoint(texts)) == expected
    assert _per_position(HandleSigner(b"k" * 32)._group_each(texts)) == expected


def test_a_usual_batch_is_grouped_in_runs_once_per_checkpoint() -> None:
    signer = HandleSigner(b"k" * 32)
    texts = BATCH_HANDLES[:7]  # four of one checkpoint, then three of another
    grouped = signer._group_runs(texts)
    assert grouped is not None and grouped[1] == {}
    assert [(g.ck_offset, g.positions, g.indexes, g.queue_offsets) for g in grouped[0]] == [
        (100, [0, 1, 2, 3], [0, 1, 2, 3], [40, 41, 42, 43]),
        (200, [4, 5, 6], [0, 1, 2], [7, 8, 9]),
    ]
    assert signer._group_runs([texts[0], texts[4], texts[1]]) is None  # not in runs: one by one
    assert signer._group_runs([*texts, "x.y"]) is None


def test_a_verified_checkpoint_part_is_forgotten_with_the_secret(tmp_path: Path) -> None:
    """The signer remembers parts it verified (a batch ack checks its batch's part once): a new
    secret must not accept a part verified under the old one."""
    signer = HandleSigner.from_store(tmp_path / "a")
    text = signer.encode(HANDLE)
    assert signer.decode(text) == HANDLE  # verified, remembered
    signer.adopt(os.urandom(32), tmp_path / "a")
    with pytest.raises(HandleError):
        signer.decode(text)


def test_received_messages_are_made_as_their_class() -> None:
    from pymq.client.simple_consumer import ReceivedMessage
    from pymq.protocol.message import MessageExt, iter_messages
    from pymq.protocol.record import encode_properties, encode_record

    buf = encode_record(b"t", b"body", encode_properties({"TAGS": "a"})) * 2
    plain = list(iter_messages(buf, broker_name="b"))
    received = list(iter_messages(buf, broker_name="b", message_class=ReceivedMessage))
    assert [type(m) for m in received] == [ReceivedMessage, ReceivedMessage]
    for m, r in zip(plain, received, strict=True):
        for name in MessageExt.__slots__:
            assert getattr(r, name) == getattr(m, name), name
        assert (r.topic, r.body, r.properties, r.broker_name) == ("t", b"body", {"TAGS": "a"}, "b")
    undecompressed = list(iter_messages(buf, decompress=False, message_class=ReceivedMessage))
    assert [type(m) for m in undecompressed] == [ReceivedMessage, ReceivedMessage]
