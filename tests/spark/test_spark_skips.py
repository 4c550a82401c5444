"""Without Java the Spark tests are skipped and the run says why; under CI=true they fail instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pytest_without_java(*args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's bin: no java there
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_without_java_the_summary_says_why_the_spark_tests_are_skipped() -> None:
    out = pytest_without_java("tests/spark/test_example.py", "tests/spark/test_route_changes.py", ci=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " skipped" in out.stdout and " passed" not in out.stdout, out.stdout
    assert "Spark tests skipped: Spark tests need Java 17 or 21 on the PATH" in out.stdout, out.stdout


def test_without_java_under_ci_the_spark_tests_fail() -> None:
    out = pytest_without_java("tests/spark/test_route_changes.py", "-x", ci=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "CI=true but no java on the PATH" in out.stdout, out.stdout
