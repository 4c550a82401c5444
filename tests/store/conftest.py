"""Fixtures for the store tests: stores on tmp dirs that are always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.store import MessageStore
from tests.store.storeutil import open_store

StoreFactory = Callable[..., MessageStore]


@pytest.fixture
def open_stores() -> Iterator[list[MessageStore]]:
    """Stores a test opens go here; any still running is halted afterwards (releasing its lock)."""
    stores: list[MessageStore] = []
    yield stores
    for s in stores:
        s.halt()


@pytest.fixture
def new_store(tmp_path: Path, open_stores: list[MessageStore]) -> StoreFactory:
    """``new_store(**config)``: start a store on ``tmp_path/store`` (the same dir every call)."""

    def factory(root: Path | None = None, **overrides: Any) -> MessageStore:
        s = open_store(root or tmp_path / "store", **overrides)
        open_stores.append(s)
        return s

    return factory


@pytest.fixture
def store(new_store: StoreFactory) -> MessageStore:
    """A running store with tiny files."""
    return new_store()
