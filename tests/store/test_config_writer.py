"""ConfigWriter: config tables written off the caller's thread, coalesced, durable before the hook runs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import pymq.broker.store.config_writer as config_writer
from pymq.broker.store.config_files import read_json
from pymq.broker.store.config_writer import ConfigWriter


class Table:
    """A table whose snapshot can be held up, to make changes arrive while a write runs."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()
        self.snapshots = 0

    def snapshot(self) -> dict[str, Any]:
        self.snapshots += 1
        self.entered.set()
        self.release.wait(10)
        return {"rows": dict(self.rows)}


def test_the_hook_runs_after_the_change_is_on_disk(tmp_path: Path) -> None:
    table = Table()
    writer = ConfigWriter(tmp_path / "t.json", table.snapshot)
    seen: list[Any] = []
    done = threading.Event()

    def on_durable(error: Exception | None) -> None:
        seen.append((error, read_json(tmp_path / "t.json")))
        done.set()

    table.rows["a"] = 1
    writer.changed(on_durable)
    assert done.wait(10)
    assert seen == [(None, {"rows": {"a": 1}})]
    writer.flush()
    assert not writer.dirty and writer.writes == 1


def test_changes_during_a_write_are_coalesced_into_one_more(tmp_path: Path) -> None:
    table = Table()
    writer = ConfigWriter(tmp_path / "t.json", table.snapshot)
    table.release.clear()  # the first write stalls in its snapshot
    table.rows["a"] = 0
    writer.changed()
    assert table.entered.wait(10)  # the first write is running
    hooks: list[int] = []
    for i in range(1, 101):
        table.rows["a"] = i
        writer.changed(lambda error, i=i: hooks.append(i) if error is None else None)
    table.release.set()
    writer.flush()
    assert read_json(tmp_path / "t.json") == {"rows": {"a": 100}}
    # one write was running, the hundred changes made during it need one more (not a hundred)
    assert writer.writes == 2 and table.snapshots == 2
    assert sorted(hooks) == list(range(1, 101))


def test_a_failed_write_is_reported_and_retried_by_the_next_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = Table()
    writer = ConfigWriter(tmp_path / "t.json", table.snapshot)
    real = config_writer.write_json_atomic
    failures = iter([OSError(28, "No space left on device")])

    def flaky(path: Path, data: Any) -> None:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        real(path, data)

    monkeypatch.setattr(config_writer, "write_json_atomic", flaky)
    errors: list[Exception | None] = []
    first = threading.Event()
    table.rows["a"] = 1
    writer.changed(lambda error: (errors.append(error), first.set()))
    assert first.wait(10)
    assert isinstance(errors[0], OSError) and "No space" in str(errors[0])
    writer.flush()  # the thread stopped after the failure; flush writes what is still dirty
    assert writer.writes == 1 and read_json(tmp_path / "t.json") == {"rows": {"a": 1}}
    assert not writer.dirty


def test_flush_without_changes_writes_nothing(tmp_path: Path) -> None:
    writer = ConfigWriter(tmp_path / "t.json", Table().snapshot)
    writer.flush()
    assert writer.writes == 0 and not (tmp_path / "t.json").exists()
