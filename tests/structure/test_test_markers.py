"""Tests live by component (tests/<component>/) and say by marker, not by folder, whether they start
servers: ``pytest -m "not integration"`` runs what needs no broker or nameserver."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: what starts a broker or a nameserver, in process or as a daemon
STARTS_SERVERS = re.compile(r"\b(LocalCluster|DaemonProcess|broker_process|namesrv_process|BrokerApp|NamesrvApp)\b")
#: the conftest fixtures that start them
SERVER_FIXTURES = {"cluster", "cluster2", "processes"}
#: a daemon started from its command line
DAEMON_COMMAND = re.compile(r"""["'](pymq-(namesrv|broker|local|bench|proxy|dashboard)|pymq\.cli\.\w+)["']""")


def starts_servers(source: str) -> bool:
    if STARTS_SERVERS.search(source) or DAEMON_COMMAND.search(source):
        return True
    for node in ast.walk(ast.parse(source)):
        is_test = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        if is_test and SERVER_FIXTURES & {a.arg for a in node.args.args}:
            return True
    return False


def marked_integration(source: str) -> bool:
    return re.search(r"pytest\.mark\.integration\b", source) is not None


def test_modules_that_start_servers_are_marked_integration() -> None:
    unmarked = [
        str(p.relative_to(TESTS))
        for p in sorted(TESTS.rglob("test_*.py"))
        if starts_servers(p.read_text()) and not marked_integration(p.read_text())
    ]
    assert not unmarked, f"start servers but carry no pytest.mark.integration: {unmarked}"


def test_no_folder_says_unit_or_integration() -> None:
    assert not (TESTS / "unit").exists() and not (TESTS / "integration").exists(), "tests go by component"


def test_the_rule_sees_servers_and_fixtures() -> None:
    assert starts_servers("async with LocalCluster(tmp) as c: pass")
    assert starts_servers("async def test_x(cluster):\n    pass\n")
    assert starts_servers("subprocess.run(['pymq-bench', 'producer'])")
    assert not starts_servers("def test_x(tmp_path):\n    assert 1 + 1 == 2\n")
    assert marked_integration("pytestmark = [pytest.mark.spark, pytest.mark.integration]")
    assert not marked_integration("pytestmark = pytest.mark.spark")
