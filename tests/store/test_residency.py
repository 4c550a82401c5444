"""Cold reads: a read far behind the commitlog end whose blocks were not mapped recently is "missing"
until prefaulted (the pull handler does that on a worker thread), and the next blocks follow."""

from __future__ import annotations

from pymq.broker.store import residency
from tests.store.conftest import StoreFactory
from tests.store.storeutil import record

MIB = 1 << 20


def test_cold_reads_are_missing_until_prefaulted_and_hot_ones_never(new_store: StoreFactory) -> None:
    store = new_store(commitlog_file_size=4 * MIB)
    res = store.residency
    assert res.block == MIB
    batch = b"".join(record("T", bytes(1000)) for _ in range(64))
    while store.commitlog.max_offset < residency.COLD_LAG + (residency.AHEAD_BLOCKS + 3) * MIB:  # ~19 MiB
        store.put("T", 0, batch)
    cold = store.get_messages("g", "T", 0, 0, 32)
    hot = store.get_messages("g", "T", 0, store.max_offset("T", 0) - 32, 32)
    assert not store.pages_missing(hot)  # within COLD_LAG of the end: never looked at
    if not res.available:  # (off Linux: nothing counts as missing)
        assert not store.pages_missing(cold)
        return
    assert cold.min_physical_offset_read == 0 and store.pages_missing(cold)
    data = b"".join(bytes(b) for b in cold.buffers)
    store.prefault(cold)
    assert not store.pages_missing(cold) and res.prefaulted == 1
    # The next blocks (across a file boundary) are mapped by prefault_after, up to AHEAD_BLOCKS.
    store.prefault_after(cold)
    assert res.prefaulted == 1 + residency.AHEAD_BLOCKS
    size = cold.total_size // cold.message_count  # (every record has this size)
    later = store.get_messages("g", "T", 0, -(-4 * MIB // size), 32)  # in the second file
    assert later.min_physical_offset_read > 4 * MIB and not store.pages_missing(later)
    # Past the blocks mapped ahead it is missing again.
    far = store.get_messages("g", "T", 0, -(-(residency.AHEAD_BLOCKS + 1) * MIB // size), 32)
    assert store.pages_missing(far)
    # Prefaulting never changes the data.
    assert b"".join(bytes(b) for b in cold.buffers) == data
