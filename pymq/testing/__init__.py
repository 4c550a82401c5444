"""Test support shipped with pymq: an in-process cluster, real daemon processes, a scripted
mock broker, a fake clock, log capture and a TCP proxy that can cut a link (partition tests).
Production code never imports this package."""

from pymq.testing.clock import FakeClock
from pymq.testing.cluster import SMALL_STORE, LocalCluster
from pymq.testing.logs import capture_logs
from pymq.testing.mock_broker import MockBroker
from pymq.testing.netproxy import LinkProxy
from pymq.testing.processes import DaemonProcess, broker_process, namesrv_process

__all__ = [
    "SMALL_STORE",
    "DaemonProcess",
    "FakeClock",
    "LinkProxy",
    "LocalCluster",
    "MockBroker",
    "broker_process",
    "capture_logs",
    "namesrv_process",
]
