"""mypy sees the blocking facade's real signatures and result types (not Any)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_sees_typed_results_through_the_sync_facade() -> None:
    """tests/typing/sync_usage.py asserts the types; a wrong argument must be an error (its ignore is used).

    Imported modules are analysed but their own errors are not this test's business (silent).
    """
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--strict", "--follow-imports=silent",
         "tests/typing/sync_usage.py"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
