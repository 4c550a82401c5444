"""Broker request handlers, one module per request family."""
