"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from tests.master_slave import record_pull_addrs


@pytest.fixture
def pulled_from(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The broker address of every pull answer the consumers get, in order."""
    return record_pull_addrs(monkeypatch)
