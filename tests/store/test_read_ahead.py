"""Read-ahead of cold pulls: the commitlog range after a cold reader's position is mapped on a thread."""

from __future__ import annotations

from pymq.broker.store import read_ahead
from tests.helpers import wait_until_sync
from tests.store.conftest import StoreFactory
from tests.store.storeutil import record


def test_a_cold_reader_gets_its_next_range_mapped_and_a_hot_one_is_left_alone(new_store: StoreFactory) -> None:
    store = new_store(commitlog_file_size=1 << 20)
    ra = store.read_ahead
    if not read_ahead.AVAILABLE:  # (kernels before 5.14, or off Linux: no thread)
        assert ra is None
        return
    assert ra is not None
    batch = b"".join(record("T", bytes(1000)) for _ in range(64))
    for _ in range(40):  # ~2.7 MB over three files
        store.put_messages("T", 0, batch)
    end = store.commitlog.max_offset
    got = store.get_messages("g", "T", 0, 0, 32)
    assert ra.covered(("g", "T", 0)) == -1  # near the end (the default hot window): not read ahead
    ra.hot_window, ra.ahead = 0, 1 << 20  # everything counts as cold here; 1 MiB ahead
    got = store.get_messages("g", "T", 0, 0, 32)
    first_end = got.max_physical_offset_read
    wait_until_sync(lambda: ra.covered(("g", "T", 0)) >= first_end + (1 << 20) - 4096, what="read-ahead")
    assert ra.populated >= 1 << 20
    populated = ra.populated
    # Still covered far enough ahead: the next pull asks nothing of the thread.
    store.get_messages("g", "T", 0, got.next_begin_offset, 32)
    assert ra.populated == populated and not ra._wanted
    # A reader that jumps to the end of the data is covered up to the end, across files.
    store.get_messages("g2", "T", 0, 2000, 32)
    wait_until_sync(lambda: ra.covered(("g2", "T", 0)) == end, what="read-ahead up to the end")
    store.shutdown()
    assert store.read_ahead is None and not ra.is_alive()
