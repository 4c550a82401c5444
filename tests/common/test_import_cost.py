"""``import pymq.client`` loads the SDK only: no CLI, no daemon config, no click, pydantic or structlog."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = {"click", "pydantic", "pydantic_core", "structlog", "pymq.config", "pymq.cli", "pymq.broker", "pymq.nameserver"}


@pytest.mark.parametrize("module", ["pymq.client", "pymq.client.sync"])
def test_sdk_import_loads_nothing_heavy(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(out.stdout)
    # a module counts under its top package, or its first two levels for pymq's own
    assert [m for m in loaded if m.split(".")[0] in HEAVY or ".".join(m.split(".")[:2]) in HEAVY] == []
