"""pymq: a RocketMQ-style distributed message queue in Python."""

from __future__ import annotations

#: the distribution pymq is installed under (``pip install pymq-rocket``; the index's ``pymq`` is an
#: unrelated project); the import name stays ``pymq``
DISTRIBUTION = "pymq-rocket"


def __getattr__(name: str) -> str:
    # Lazy: importlib.metadata costs milliseconds that ``import pymq.client`` should not pay.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(DISTRIBUTION)
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'pymq' has no attribute {name!r}")
