"""Run one atheris target: ``python fuzz/fuzz_one.py TARGET [libFuzzer flags] [corpus dirs]``.

fuzz/run.py calls this (one process per target); run it directly to replay a crash file
(``python fuzz/fuzz_one.py records crash-…``). ``PYMQ_FUZZ_SPEEDUPS=path/to/_speedups….so``
loads that build of the accelerator (fuzz/build_sanitized.py makes one with ASan and UBSan)
as ``pymq._speedups`` instead of the installed one.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import atheris

INSTRUMENTED = [
    "targets",
    "pymq.protocol.frame",
    "pymq.protocol.record",
    "pymq.protocol.record_batch",
    "pymq.protocol.wire_header",
    "pymq.protocol.headers",
    "pymq.protocol.requests",
    "pymq.protocol.requests_pop",
    "pymq.protocol.requests_replication",
    "pymq.protocol.requests_transaction",
    "pymq.security.signing",
    "pymq.broker.ha.codec",
    "pymq.broker.store.dispatcher",
    "pymq.broker.timer.timer_log",
    "pymq.broker.timer.timer_wheel",
    "pymq.broker.timer.checkpoint",
    "pymq.broker.store.config_files",
    "pymq.broker.pop.records",
    "pymq.broker.pop.receipt",
    "pymq.grpc_proxy.mapping",
    "pymq.grpc_proxy.auth",
    "pymq.grpc_proxy.handlers",
    "pymq.protocol.filter",
    "pymq.protocol.message",
    "pymq.client.producer_encoding",
    "pymq.remoting.command",
    "pymq.remoting.wire",
    "pymq.remoting.send_header",
    "pymq.remoting.message_layout",
]


def _not_instrumented() -> list[str]:
    """Every pymq module but the ones under test (atheris's include is by top-level package only)."""
    root = Path(__file__).resolve().parent.parent / "pymq"
    names = []
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name not in INSTRUMENTED:
            names.append(name)
    return names


def _load_speedups(path: str) -> None:
    spec = importlib.util.spec_from_file_location("pymq._speedups", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    import pymq

    sys.modules["pymq._speedups"] = module
    spec.loader.exec_module(module)
    pymq._speedups = module  # type: ignore[attr-defined]


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    name = sys.argv.pop(1)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    accel = os.environ.get("PYMQ_FUZZ_SPEEDUPS")
    if accel:
        _load_speedups(accel)
    # Only the code under test is instrumented (pymq.broker's package imports the whole broker).
    with atheris.instrument_imports(include=["pymq", "targets"], exclude=_not_instrumented()):
        import targets
    if accel:
        assert targets.ACCEL is sys.modules["pymq._speedups"] and targets.ACCEL.__file__ == accel
    print(f"fuzz target {name}: accelerator {getattr(targets.ACCEL, '__file__', None)}", flush=True)
    target = targets.TARGETS[name]
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
