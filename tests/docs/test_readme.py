"""The README's Python snippets run against an in-process cluster (after the tour's sends, twice each) and print
exactly what they say.

A snippet states its output in ``# prints: TEXT`` comments (``…`` stands for anything); each
snippet runs as its own program, with the nameserver address replaced by the cluster's.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from pymq.client import Message, Producer
from pymq.testing import LocalCluster

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CLAIM = "# prints:"


def snippets() -> list[str]:
    return SNIPPET.findall(README.read_text())


def claims(code: str) -> list[str]:
    return [line.split(CLAIM, 1)[1].strip() for line in code.splitlines() if CLAIM in line]


def claim_pattern(claim: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part) for part in claim.split("…")) + "$", re.M)


def headings_without_blank_line(text: str) -> list[str]:
    """Markdown headings (outside code fences) that directly follow a non-blank line."""
    found: list[str] = []
    lines = text.splitlines()
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line) and i > 0 and lines[i - 1].strip():
            found.append(line)
    return found


def test_headings_follow_a_blank_line() -> None:
    assert headings_without_blank_line("text\n### Heading\n") == ["### Heading"]
    assert headings_without_blank_line("text\n\n### Heading\n```sh\nx\n# comment\n```\n") == []
    docs = [README, *sorted((README.parent / "docs").glob("*.md"))]
    bad = {doc.name: h for doc in docs if (h := headings_without_blank_line(doc.read_text()))}
    assert bad == {}


def test_claims_are_patterns() -> None:
    pattern = claim_pattern("SEND_OK MessageQueue [topic=orders, queueId=…]")
    assert pattern.search("x\nSEND_OK MessageQueue [topic=orders, queueId=3]\n")
    assert not pattern.search("SEND_OK MessageQueue [topic=other, queueId=3]")


def unclaimed(out: str, claimed: list[str]) -> tuple[list[str], list[str]]:
    """Printed lines no claim matches and claims no line matches (each line answers one claim)."""
    lines = out.splitlines()
    missing: list[str] = []
    for claim in claimed:
        pattern = claim_pattern(claim)
        hit = next((i for i, line in enumerate(lines) if pattern.search(line)), None)
        if hit is None:
            missing.append(claim)
        else:
            del lines[hit]
    return lines, missing


def test_every_printed_line_answers_one_claim() -> None:
    assert unclaimed("a 1\nb 2\n", ["b …", "a …"]) == ([], [])
    assert unclaimed("a 1\na 2\nb 2\n", ["a …", "b …"]) == (["a 2"], [])
    assert unclaimed("a 1\n", ["a …", "b …"]) == ([], ["b …"])


async def test_readme_python_snippets_print_what_they_claim(cluster: LocalCluster) -> None:
    """On a topic the tour has used, twice each (as a reader re-running them would): the snippets print
    exactly their claimed lines, nothing more (order aside: timers may land in either order)."""
    blocks = snippets()
    assert len(blocks) >= 2 and sum(len(claims(b)) for b in blocks) >= 3, "the README lost its examples"
    await cluster.create_topic("orders", 4)  # the tour creates it (pymq-local would auto-create it)
    async with Producer(cluster.namesrv_addr) as producer:  # the tour's send, and more on other queues
        for body in (b"hello", b"hi", b"hey", b"hello there", b"hello"):
            await producer.send(Message("orders", body, tags="created", keys=["order-1"]))
    for code in blocks:
        program = code.replace("127.0.0.1:9876", cluster.namesrv_addr)
        for run in (1, 2):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", program, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, f"{code}\n{err.decode()}"
            assert err == b"", err.decode()  # nothing logged at default settings
            extra, missing = unclaimed(out.decode(), claims(code))
            assert (extra, missing) == ([], []), f"run {run} of:\n{code}\nprinted:\n{out.decode()}"
