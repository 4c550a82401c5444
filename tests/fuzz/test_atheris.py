"""Coverage-guided fuzzing in CI: every atheris target of fuzz/ for a few seconds over its committed corpus.

The long form (minutes a target, the C accelerator under ASan + UBSan) is ``fuzz/run.py``;
see fuzz/README.md. atheris is in the ``test`` extra (Linux x86-64 wheels); where it cannot
be imported these tests skip on a developer's machine and fail under ``CI=true``, so a CI
run without the fuzzer never passes as fuzzed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "fuzz"
HAVE_ATHERIS = importlib.util.find_spec("atheris") is not None

#: seconds a target fuzzes in CI; two at a time: 8 targets take about 40 s of wall time
CI_SECONDS = 4

needs_atheris = pytest.mark.skipif(
    not HAVE_ATHERIS and os.environ.get("CI") != "true",
    reason="atheris is not installed (pip install -e '.[test]' on Linux x86-64)",
)


def _targets_module() -> ModuleType:
    sys.path.insert(0, str(FUZZ))
    try:
        import targets
    finally:
        sys.path.remove(str(FUZZ))
    return targets


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(FUZZ / "run.py"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.atheris
@needs_atheris
def test_every_target_fuzzes_clean_for_a_few_seconds(tmp_path: Path) -> None:
    if not HAVE_ATHERIS:
        pytest.fail("atheris is not installed: CI must install it (it is in the test extra)")
    report = tmp_path / "report.json"
    proc = _run(
        [
            "--seconds",
            str(CI_SECONDS),
            "--jobs",
            "2",
            "--quiet",
            "--work",
            str(tmp_path / "work"),
            "--artifacts",
            str(tmp_path / "artifacts"),
            "--json",
            str(report),
        ]
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    results = {r["target"]: r for r in json.loads(report.read_text())["results"]}
    assert set(results) == set(_targets_module().TARGETS), results.keys()
    for name, r in results.items():
        # It really fuzzed: the corpus was loaded, coverage measured and new inputs were run.
        seeds = len(list((FUZZ / "corpus" / name).iterdir()))
        assert r["returncode"] == 0 and not r["sanitizer_report"], r
        assert r["cov"] and r["cov"] > 10, r
        assert r["executions"] and r["executions"] > seeds + 20, r
    assert not list((tmp_path / "artifacts").iterdir())


@pytest.mark.atheris
@needs_atheris
def test_a_finding_fails_the_run_and_leaves_its_input(tmp_path: Path) -> None:
    if not HAVE_ATHERIS:
        pytest.fail("atheris is not installed: CI must install it (it is in the test extra)")
    proc = _run(
        ["--seconds", "3", "--quiet", "--artifacts", str(tmp_path), "selftest"], env={"PYMQ_FUZZ_SELFTEST": "1"}
    )
    assert proc.returncode == 1, proc.stdout[-4000:]
    assert "selftest finding" in proc.stdout and "FAILED: ['selftest']" in proc.stdout
    assert [p.name.startswith("selftest-crash-") for p in tmp_path.iterdir()] == [True]


def test_the_committed_corpus_passes_every_target() -> None:
    """Each seed (fuzz/make_corpus.py) runs through its target in process: the harness itself is sound."""
    targets = _targets_module()
    for name, target in targets.TARGETS.items():
        seeds = sorted((targets.CORPUS / name).iterdir())
        assert seeds, name
        for seed in seeds:
            target(seed.read_bytes())


def test_the_differential_catches_an_accelerator_that_answers_otherwise() -> None:
    targets = _targets_module()
    if targets.ACCEL is None:
        pytest.skip("no accelerator built: nothing to compare")
    from pymq.protocol import record

    def answers_by_implementation() -> str:
        return "C" if record.speedups is not None else "Python"

    with pytest.raises(targets.Divergence, match="accelerator"):
        targets.differential(answers_by_implementation, allowed=())

    def errs_by_implementation() -> None:
        raise (KeyError if record.speedups is not None else ValueError)("x")

    with pytest.raises(targets.Divergence):
        targets.differential(errs_by_implementation, allowed=(KeyError, ValueError))
    with pytest.raises(KeyError):  # an error type the target does not allow is a finding, not a result
        targets.differential(errs_by_implementation, allowed=(ValueError,))
