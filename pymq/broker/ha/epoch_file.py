"""The epoch file: one line per master term, ``<epoch> <start offset>``, in the store directory.

Each time a broker becomes master it starts a new term: a higher epoch, beginning at its
commitlog end. A term ends where the next one starts (the last one at the commitlog end),
so the file says which master wrote every byte of the commitlog, as RocketMQ 5's
``epochFileCheckpoint`` does. A slave keeps its master's list (see
:mod:`pymq.broker.ha.epochs`, which compares two lists to find where two stores stop
agreeing).

Format (text, so an operator can read it)::

    pymq-epochs 1
    <epoch> <start offset> <term id>    one line per term, epochs and offsets ascending

The term id (16 hex digits, random when the term begins) tells apart terms that got the
same epoch number in different places (two masters started on their own both begin with
epoch 1): only the same (epoch, start, term id) is the same term.

Writes are atomic: a temporary file is written and synced, renamed over the old one, and
the directory synced, so a crash leaves the old list or the new one, never a mix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from pymq.errors import StoreError

FILE_NAME = "epoch"
HEADER = "pymq-epochs 1"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One master term: ``epoch`` wrote the commitlog from ``start_offset`` on."""

    epoch: int
    start_offset: int
    #: random id of the term (see the module docstring)
    term_id: int = 0


def new_term_id() -> int:
    return int.from_bytes(os.urandom(8), "big")


def parse(text: str) -> list[EpochEntry]:
    """The entries of an epoch file's text; :class:`StoreError` if it is not one."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0] != HEADER:
        raise StoreError(f"not an epoch file (first line {lines[0] if lines else ''!r}, expected {HEADER!r})")
    entries: list[EpochEntry] = []
    for ln in lines[1:]:
        parts = ln.split()
        if len(parts) != 3 or not all(p.isdigit() for p in parts[:2]) or not _is_hex(parts[2]):
            raise StoreError(f"bad epoch file line {ln!r}: expected '<epoch> <start offset> <term id>'")
        entries.append(EpochEntry(int(parts[0]), int(parts[1]), int(parts[2], 16)))
    check(entries)
    return entries


def render(entries: list[EpochEntry]) -> str:
    check(entries)
    return "\n".join([HEADER, *(f"{e.epoch} {e.start_offset} {e.term_id:016x}" for e in entries)]) + "\n"


def _is_hex(s: str) -> bool:
    return 0 < len(s) <= 16 and all(c in "0123456789abcdefABCDEF" for c in s)


def check(entries: list[EpochEntry]) -> None:
    """Epochs strictly ascending, start offsets never descending."""
    for a, b in pairwise(entries):
        if b.epoch <= a.epoch or b.start_offset < a.start_offset:
            raise StoreError(f"epoch entries out of order: {a} then {b}")


class EpochFile:
    """The epoch list of one store directory, kept in memory and written through atomically."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self.entries: list[EpochEntry] = []

    def load(self) -> list[EpochEntry]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            self.entries = []
        else:
            self.entries = parse(text)
        return self.entries

    @property
    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    @property
    def epoch(self) -> int:
        """The newest epoch (0: none yet)."""
        return self.entries[-1].epoch if self.entries else 0

    def replace(self, entries: list[EpochEntry]) -> None:
        """Write ``entries`` as the whole list (a slave takes its master's)."""
        entries = list(entries)
        if entries != self.entries:
            write_atomic(self.path, render(entries))
            self.entries = entries

    def begin_term(self, epoch: int, start_offset: int) -> EpochEntry:
        """Start a new term at ``start_offset``: entries starting past it are dropped (never written here)."""
        kept = [e for e in self.entries if e.start_offset <= start_offset]
        if kept and epoch <= max(e.epoch for e in self.entries):
            raise StoreError(f"epoch {epoch} is not above the known epochs (newest {self.epoch})")
        entry = EpochEntry(epoch, start_offset, new_term_id())
        self.replace([*kept, entry])
        return entry


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
