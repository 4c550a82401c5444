"""The nameserver: route tables, broker registration and expiry."""

from pymq.nameserver.app import NamesrvApp
from pymq.nameserver.registry import RouteRegistry

__all__ = ["NamesrvApp", "RouteRegistry"]
