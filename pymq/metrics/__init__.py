"""Prometheus metrics for the daemons (the optional ``pymq-rocket[metrics]`` extra).

Each daemon gets its own :class:`~prometheus_client.CollectorRegistry`, served over HTTP on
the event loop (``GET /metrics``). Request counts and latencies come from an ``after``
interceptor on the dispatcher; everything else is read from the live state when Prometheus scrapes, so no
task or thread keeps gauges up to date. Series are listed in ``deploy/README.md``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pymq import DISTRIBUTION
from pymq.errors import ConfigError
from pymq.metrics.server import MetricsServer

if TYPE_CHECKING:
    from pymq.metrics.broker import BrokerView
    from pymq.metrics.namesrv import NamesrvView

__all__ = ["MetricsServer", "start_broker_metrics", "start_namesrv_metrics"]

INSTALL_HINT = f"pip install '{DISTRIBUTION}[metrics]'"


def _new_registry() -> Any:
    try:
        import prometheus_client as prom
    except ImportError as exc:
        raise ConfigError(
            f"a metrics port is configured but prometheus-client is not installed: {INSTALL_HINT}"
            " (or drop metrics_port / --metrics-port)"
        ) from exc
    # One series per counter: the *_created timestamps double them and no dashboard reads them.
    prom.disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = prom.CollectorRegistry()
    prom.ProcessCollector(registry=registry)
    prom.PlatformCollector(registry=registry)
    prom.GCCollector(registry=registry)
    return registry


def _serve(app: Any, registry: Any, collector: Any, port: int, name: str) -> MetricsServer:
    from pymq.metrics.requests import RequestMetrics

    registry.register(collector)
    requests = RequestMetrics(registry)
    tls = getattr(app.config, "tls", None)
    ctx = None
    if tls is not None and tls.enable and tls.metrics:
        from pymq.security.daemon import listener_tls

        ctx = listener_tls(tls)
    server = MetricsServer(registry, app.config.host, port, name=name, ssl=ctx)
    server.attach_interceptor(app.dispatcher, requests)
    return server


def start_broker_metrics(app: BrokerView, port: int) -> MetricsServer:
    """Serve a broker's metrics on ``port`` (0: any free port, see ``.port``) of its listen host."""
    registry = _new_registry()  # first: it says how to install prometheus-client when it is missing
    from pymq.metrics.broker import BrokerCollector

    return _serve(app, registry, BrokerCollector(app), port, "broker")


def start_namesrv_metrics(app: NamesrvView, port: int) -> MetricsServer:
    """Serve a nameserver's metrics on ``port`` (0: any free port, see ``.port``) of its listen host."""
    registry = _new_registry()  # first: it says how to install prometheus-client when it is missing
    from pymq.metrics.namesrv import NamesrvCollector

    return _serve(app, registry, NamesrvCollector(app, started_at=time.time()), port, "namesrv")
