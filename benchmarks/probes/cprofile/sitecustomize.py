"""Probe: cProfile a daemon's main thread (its event loop) and dump the stats when it exits.

    PROFILE_DIR=/tmp/prof PYTHONPATH=.:benchmarks/probes/cprofile \\
        python benchmarks/replication_bench.py --producers 8 --seconds 5
    python -c "import pstats; pstats.Stats('/tmp/prof/<pid>-broker.prof').sort_stats('tottime').print_stats(30)"

Profiles every process started with the variable set whose command line names ``PROFILE_MATCH``
(default ``broker``); writes ``PROFILE_DIR/<pid>-<match>.prof`` at a normal exit (SIGTERM's
graceful shutdown included). cProfile slows Python code ~1.5-2x: compare profiles, not rates.
With ``PROFILE_SIGNALS=1`` profiling starts on SIGUSR1 and stops (and dumps) on SIGUSR2 instead, so
a driver can profile just its load (``benchmarks/replication_bench.py --profile-dir DIR`` does).
Does nothing without PROFILE_DIR.
"""

import atexit
import os
import sys

_DIR = os.environ.get("PROFILE_DIR")
_MATCH = os.environ.get("PROFILE_MATCH", "broker")
if _DIR and any(_MATCH in a for a in sys.argv):
    import cProfile

    _prof = cProfile.Profile()

    def _dump() -> None:
        _prof.disable()
        os.makedirs(_DIR, exist_ok=True)
        _prof.dump_stats(os.path.join(_DIR, f"{os.getpid()}-{_MATCH}.prof"))

    if os.environ.get("PROFILE_SIGNALS"):
        import signal

        signal.signal(signal.SIGUSR1, lambda *_: _prof.enable())
        signal.signal(signal.SIGUSR2, lambda *_: _dump())
    else:
        _prof.enable()
        atexit.register(_dump)
