"""pymq: a RocketMQ-style distributed message queue in Python."""

__version__ = "0.1.0"
