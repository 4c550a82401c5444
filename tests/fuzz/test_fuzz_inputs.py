"""The live-daemon fuzzer's input generator (benchmarks/fuzz_inputs.py), without daemons.

Every kind, over many seeds, with and without ACL credentials, gives bytes and never raises
(a generator that raises ends a fuzz worker: issue 35's ``bad_length`` did, and the run went
on without fuzzing). What each kind promises about its bytes is checked too.
"""

from __future__ import annotations

import random
import struct

import pytest

from benchmarks.fuzz_daemon import FUZZ_CREDS
from benchmarks.fuzz_inputs import (
    ENDING_KINDS,
    KINDS,
    REMOTING_ENDING_KINDS,
    REMOTING_STREAM_KINDS,
    STREAM_KINDS,
    Inputs,
)
from pymq.protocol.frame import FrameDecoder
from pymq.security.signing import Credentials

SEEDS = range(200)
PER_SEED = 25


@pytest.mark.parametrize("creds", [None, FUZZ_CREDS], ids=["plain", "acl"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_makes_bytes_for_many_seeds(kind: str, creds: Credentials | None) -> None:
    made = 0
    for seed in SEEDS:
        gen = Inputs(random.Random(seed), creds)
        for _ in range(PER_SEED):
            data, last = gen.make(kind)
            assert isinstance(data, bytes) and data and isinstance(last, bool)
            made += 1
    assert made == len(SEEDS) * PER_SEED


def test_the_kinds_are_all_used_by_the_workers() -> None:
    """Each kind the generator knows is one a worker picks (with a positive weight)."""
    sets = (STREAM_KINDS, ENDING_KINDS, REMOTING_STREAM_KINDS, REMOTING_ENDING_KINDS)
    picked = {k for kinds, weights in sets for k, w in zip(kinds, weights, strict=True) if w}
    assert picked == set(KINDS)


def test_bad_length_covers_the_u32_edges() -> None:
    """The frame and header lengths reach 2^32 - 1, and a header longer than its frame is among them."""
    lengths: set[tuple[int, int]] = set()
    for seed in range(100):
        gen = Inputs(random.Random(seed))
        for _ in range(20):
            data, last = gen.make("bad_length")
            assert last
            lengths.add(struct.unpack(">II", data[:8]))
    assert (2**32 - 1, 2**32 - 1) in lengths
    assert any(0 < n < hl for n, hl in lengths)


@pytest.mark.parametrize("creds", [None, FUZZ_CREDS], ids=["plain", "acl"])
def test_stream_kinds_are_whole_frames(creds: Credentials | None) -> None:
    """What is pipelined on one connection must decode as exactly one frame each (else it ends the connection)."""
    for seed in range(50):
        gen = Inputs(random.Random(seed), creds)
        for kind in STREAM_KINDS[0]:
            data, last = gen.make(kind)
            assert not last
            assert len(FrameDecoder().feed(data)) == 1, (seed, kind)


def test_same_seed_same_inputs() -> None:
    """A run is reproducible from its seed."""
    a, b = Inputs(random.Random(5)), Inputs(random.Random(5))
    assert [a.make(k) for k in KINDS * 20] == [b.make(k) for k in KINDS * 20]


@pytest.mark.parametrize("creds", [None, FUZZ_CREDS], ids=["plain", "acl"])
def test_remoting_stream_kinds_are_whole_remoting_frames_and_broken_ones_are_not(creds: Credentials | None) -> None:
    """A remoting connection's pipelined inputs decode as one RocketMQ frame each; a broken one never does."""
    from pymq.errors import ProtocolError
    from pymq.remoting.command import RemotingDecoder, sniff
    from pymq.security.remoting_signing import verify

    signed = 0
    for seed in range(50):
        gen = Inputs(random.Random(seed), creds)
        for kind in REMOTING_STREAM_KINDS[0]:
            data, last = gen.make(kind)
            assert not last and sniff(data[:9]) == "remoting", (seed, kind)
            (cmd,) = RemotingDecoder().feed(data)
            if creds is not None and cmd.ext_fields and cmd.ext_fields.get("AccessKey") == creds.access_key:
                signed += verify(cmd.ext_fields, cmd.body, creds.secret_key)
        data, last = gen.make("remoting_broken")
        assert last
        try:
            whole = RemotingDecoder().feed(data)
        except ProtocolError:
            whole = []
        assert whole == [], (seed, data)
    assert creds is None or signed > 10
