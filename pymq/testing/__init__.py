"""Test support shipped with pymq: an in-process cluster, real daemon processes, a scripted
mock broker, a fake clock and log capture. Production code never imports this package."""

from pymq.testing.clock import FakeClock
from pymq.testing.cluster import SMALL_STORE, LocalCluster
from pymq.testing.logs import capture_logs
from pymq.testing.mock_broker import MockBroker
from pymq.testing.processes import DaemonProcess, broker_process, namesrv_process

__all__ = [
    "SMALL_STORE",
    "DaemonProcess",
    "FakeClock",
    "LocalCluster",
    "MockBroker",
    "broker_process",
    "capture_logs",
    "namesrv_process",
]
