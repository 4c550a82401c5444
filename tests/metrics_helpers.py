"""Helpers for the metrics tests: an HTTP GET and a Prometheus scrape parsed into samples."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import pytest

prom_parser = pytest.importorskip("prometheus_client.parser")  # the pymq-rocket[metrics] extra

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def http_get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def scrape(url: str) -> tuple[str, Samples]:
    """The exposition text and its samples keyed by (name, labels)."""
    status, _, body = await asyncio.to_thread(http_get, url)
    assert status == 200
    text = body.decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in prom_parser.text_string_to_metric_families(text)
        for s in fam.samples
    }
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]
