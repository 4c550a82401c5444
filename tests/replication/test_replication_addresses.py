"""A slave's HA address across role changes (pymq.broker.ha.replication): the configured
``ha_master_addr`` belongs to the configured ``master_addr``. No sockets."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pymq.broker.ha.replication import Replication
from pymq.config import BrokerConfig


@pytest.mark.parametrize(
    ("following", "kept"), [("127.0.0.1:1000", "127.0.0.1:1999"), ("127.0.0.1:3000", None)], ids=["same", "other"]
)
async def test_a_slave_keeps_its_configured_ha_address_only_while_following_the_configured_master(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, following: str, kept: str | None
) -> None:
    """The partition test puts a proxy in front of the master's HA port this way (ha_master_addr)."""
    cfg = BrokerConfig(master_addr="127.0.0.1:1000", ha_master_addr="127.0.0.1:1999")
    role: Any = SimpleNamespace(current=SimpleNamespace(master_addr=following, is_slave=True))
    rep = Replication(
        cfg,
        SimpleNamespace(root=tmp_path),  # type: ignore[arg-type]
        rpc=None,  # type: ignore[arg-type]
        address=lambda: "127.0.0.1:2000",
        discovered_master=lambda: None,
        advertised_host="127.0.0.1",
        role=role,
    )
    used: list[str | None] = []

    async def start_slave() -> None:
        used.append(rep._ha_master_addr)

    monkeypatch.setattr(rep, "_start_slave", start_slave)
    await rep.become_slave()
    assert used == [kept]
