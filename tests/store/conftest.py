"""Fixtures for the store tests: stores on tmp dirs that are always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pymq.broker.put_order import default_put_hooks
from pymq.broker.put_path import PutPath
from pymq.broker.store import MessageStore
from tests.store.storeutil import STORE_HOST, make_config, open_store

StoreFactory = Callable[..., MessageStore]
PutPathFactory = Callable[..., PutPath]


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
def new_put_path(tmp_path: Path, open_stores: list[MessageStore]) -> PutPathFactory:
    """``new_put_path(**config)``: like ``new_store``, with the broker's put hooks (delays) in front."""

    def factory(root: Path | None = None, **overrides: Any) -> PutPath:
        s = MessageStore(make_config(root or tmp_path / "store", **overrides), store_host=STORE_HOST)
        path = PutPath(s, default_put_hooks(s.config.delay_levels_ms))  # before start: recovery uses the rules
        s.start()
        open_stores.append(s)
        return path

    return factory


@pytest.fixture
def store(new_store: StoreFactory) -> MessageStore:
    """A running store with tiny files."""
    return new_store()
