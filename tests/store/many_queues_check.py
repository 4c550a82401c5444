"""10,000 queues in one store under a low descriptor limit: ``python many_queues_check.py STORE NOFILE QUEUES``.

Run in its own process (the limit is per process). Lowers RLIMIT_NOFILE to NOFILE, then:
puts one message into each of QUEUES queues (100 per topic) and reads every one back; shuts
down cleanly and reopens (the queue ends are restored without mapping a file), reads and
puts again; then stops the way a crash would and reopens (abnormal recovery) and reads every
queue once more. Prints one JSON line of figures; any failure raises (exit status 1).

Self-contained on purpose (imports only ``pymq``): it runs as a script.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

from pymq.broker.store import GetStatus, MessageStore, PutStatus
from pymq.config import StoreConfig
from pymq.protocol.record import encode_record, pack_host, parse_record

PER_TOPIC = 100
BORN_HOST = pack_host("10.1.2.3", 4567)


def config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_dir=root,
        commitlog_file_size=4 * 1024 * 1024,
        consume_queue_file_entries=64,  # 1,280-byte files: 10,000 of them are quick to create
        consume_queue_max_mapped_files=2_000,  # fewer than the queues: the LRU unmaps and remaps
        index_hash_slots=4096,
        index_max_entries=100_000,
        cleanup_interval_ms=3_600_000,
    )


def queues(n: int) -> list[tuple[str, int]]:
    return [(f"Scale{i // PER_TOPIC}", i % PER_TOPIC) for i in range(n)]


def body(topic: str, qid: int, round_: int) -> bytes:
    return f"{topic}/{qid}/{round_}".encode()


def put_all(store: MessageStore, qs: list[tuple[str, int]], round_: int) -> float:
    t0 = time.perf_counter()
    for topic, qid in qs:
        rec = encode_record(topic.encode(), body(topic, qid, round_), b"", born_timestamp=1, born_host=BORN_HOST)
        (r,) = store.put(topic, qid, rec)
        assert r.status is PutStatus.PUT_OK and r.queue_offset == round_, (topic, qid, r)
    return time.perf_counter() - t0


def read_all(store: MessageStore, qs: list[tuple[str, int]], rounds: int) -> None:
    for topic, qid in qs:
        got = store.get_messages("g", topic, qid, 0, 32)
        assert got.status is GetStatus.FOUND and got.message_count == rounds, (
            topic,
            qid,
            got.status,
            got.message_count,
        )
        data = b"".join(bytes(b) for b in got.buffers)
        bodies, pos = [], 0
        while pos < len(data):
            rec = parse_record(data[pos:])
            bodies.append(rec.body)
            pos += rec.total_size
        assert bodies == [body(topic, qid, r) for r in range(rounds)], (topic, qid, bodies)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> None:
    root, nofile, n = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    qs = queues(n)
    out: dict[str, float | int] = {"queues": n, "nofile": nofile}

    store = MessageStore(config(root))
    store.start()
    out["first_touch_seconds"] = round(put_all(store, qs, 0), 3)
    read_all(store, qs, 1)
    # The files are made on the store's maker thread (adopting them is where the LRU unmaps).
    t0 = time.perf_counter()
    while store.map_pool.pending:
        assert time.perf_counter() - t0 < 300, "the maker thread did not make the files"
        time.sleep(0.01)
    out["files_made_after_seconds"] = round(time.perf_counter() - t0, 3)
    read_all(store, qs, 1)
    out["fds_after_first_touch"] = open_fds()
    out["mapped_after_first_touch"] = len(store.map_pool)
    out["evictions"] = store.map_pool.evictions
    store.flush_logics()
    store.shutdown()

    t0 = time.perf_counter()
    store = MessageStore(config(root))
    store.start()
    out["clean_restart_seconds"] = round(time.perf_counter() - t0, 3)
    out["maps_at_clean_restart"] = store.map_pool.maps
    assert store.map_pool.maps == 0, "a clean restart mapped consume-queue files"
    assert all(store.max_offset(t, q) == 1 for t, q in qs)
    read_all(store, qs, 1)
    put_all(store, qs, 1)
    read_all(store, qs, 2)
    store.halt()  # what kill -9 leaves

    t0 = time.perf_counter()
    store = MessageStore(config(root))
    store.start()
    out["crash_restart_seconds"] = round(time.perf_counter() - t0, 3)
    assert store.recovery is not None and store.recovery.abnormal
    read_all(store, qs, 2)
    out["fds_at_end"] = open_fds()
    store.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
