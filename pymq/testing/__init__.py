"""Test support shipped with pymq: an in-process cluster and real daemon processes."""

from pymq.testing.cluster import SMALL_STORE, LocalCluster
from pymq.testing.processes import DaemonProcess, broker_process, namesrv_process

__all__ = ["SMALL_STORE", "DaemonProcess", "LocalCluster", "broker_process", "namesrv_process"]
