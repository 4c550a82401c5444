"""Fixtures shared by the integration tests."""

from __future__ import annotations

import time

import pytest

from pymq.testing import FakeClock
from tests.master_slave import record_pull_addrs


@pytest.fixture
def pulled_from(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The broker address of every pull answer the consumers get, in order."""
    return record_pull_addrs(monkeypatch)


@pytest.fixture
def clock() -> FakeClock:
    """A clock for the brokers (``LocalCluster(clock=...)``): pop times, invisible times and transaction
    timeouts. It reads the real wall time at first, then moves only when the test advances it."""
    return FakeClock(wall_ms=int(time.time() * 1000))
