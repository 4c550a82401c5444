"""``<store>/queue_ends``: every consume queue's min and max offset, written at a clean shutdown.

With it, a restart after a clean shutdown knows each queue's ends without mapping its files or
binary-searching the last one for the first all-zero entry (10,000 queues: no 10,000 maps at
start). It is trusted only if it records the same commitlog range the store recovered (then no
record was appended or removed since it was written) and is deleted once read, so a crash
later never finds a stale copy. Format: JSON ``{"commitlog": [min, end], "queues": [[topic,
queue_id, min_offset, max_offset], ...]}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from pymq.logs import get_logger

log = get_logger("broker.store")

FILE_NAME = "queue_ends"

#: (topic, queue id) -> (min offset, max offset)
QueueEnds = dict[tuple[str, int], tuple[int, int]]


def save(root: Path, commitlog_range: tuple[int, int], queues: Iterable[tuple[str, int, int, int]]) -> None:
    """Write the ends atomically (temp file, fsync, rename)."""
    path = root / FILE_NAME
    tmp = root / (FILE_NAME + ".tmp")
    data = json.dumps({"commitlog": list(commitlog_range), "queues": [list(q) for q in queues]}, separators=(",", ":"))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def take(root: Path) -> tuple[tuple[int, int], QueueEnds] | None:
    """Read and delete the file: ``((commitlog min, commitlog end), ends)``, or None if absent or unreadable."""
    path = root / FILE_NAME
    (root / (FILE_NAME + ".tmp")).unlink(missing_ok=True)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    try:
        data = json.loads(raw)
        cl_min, cl_end = (int(x) for x in data["commitlog"])
        ends: QueueEnds = {(str(t), int(q)): (int(lo), int(hi)) for t, q, lo, hi in data["queues"]}
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("queue_ends_unreadable", reason=str(exc))
        return None
    return (cl_min, cl_end), ends
