"""The dependency rules of STYLE.md, checked by walking every module's imports (without importing)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pymq"


def imports_of(path: Path, module: str) -> set[str]:
    """Absolute names a module imports; ``from X import Y`` counts as ``X.Y`` (Y may be a submodule)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def modules(sub: str = "") -> dict[str, set[str]]:
    root = PKG / sub if sub else PKG
    out = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = imports_of(path, ".".join(parts))
    return out


def offenders(mods: dict[str, set[str]], bad: callable) -> list[str]:  # type: ignore[valid-type]
    return sorted(f"{m} -> {i}" for m, imps in mods.items() for i in imps if bad(i))


def ours(name: str) -> bool:
    return name == "pymq" or name.startswith("pymq.")


def test_protocol_imports_nothing_of_ours_but_errors() -> None:
    """pymq.protocol depends only on itself and pymq.errors (no I/O layers)."""
    bad = offenders(modules("protocol"), lambda i: ours(i) and not i.startswith(("pymq.protocol.", "pymq.errors.")))
    assert bad == []


def test_protocol_does_no_io() -> None:
    """pymq.protocol imports no event loop or I/O multiplexing (sans-IO)."""
    bad = offenders(modules("protocol"), lambda i: i.split(".")[0] in {"asyncio", "uvloop", "selectors", "ssl"})
    assert bad == []


def test_store_has_no_sockets_or_asyncio() -> None:
    """pymq.broker.store never imports asyncio, uvloop, socket or pymq.transport."""
    bad = offenders(
        modules("broker/store"),
        lambda i: i.split(".")[0] in {"asyncio", "uvloop", "socket", "selectors"} or i.startswith("pymq.transport"),
    )
    assert bad == []


def test_client_never_imports_server_side() -> None:
    """pymq.client never imports the broker, its store or the nameserver."""
    bad = offenders(modules("client"), lambda i: i.startswith(("pymq.broker", "pymq.nameserver")))
    assert bad == []


def test_only_spark_connector_imports_pyspark_and_nobody_imports_it() -> None:
    """pyspark is imported only in pymq.spark_connector, and nothing imports pymq.spark_connector."""
    mods = modules()
    uses_pyspark = offenders(
        {m: i for m, i in mods.items() if not m.startswith("pymq.spark_connector")},
        lambda i: i.split(".")[0] == "pyspark",
    )
    imports_connector = offenders(
        {m: i for m, i in mods.items() if not m.startswith("pymq.spark_connector")},
        lambda i: i.startswith("pymq.spark_connector"),
    )
    assert uses_pyspark == [] and imports_connector == []


def test_production_code_never_imports_testing() -> None:
    """Nothing outside pymq.testing imports pymq.testing."""
    bad = offenders(
        {m: i for m, i in modules().items() if not m.startswith("pymq.testing")},
        lambda i: i.startswith("pymq.testing"),
    )
    assert bad == []


def test_walk_sees_the_whole_package() -> None:
    """The checks above really walk the code (guards against a silently empty walk)."""
    mods = modules()
    assert "pymq.broker.store.message_store" in mods and "pymq.client.producer" in mods
    assert any(i.startswith("pymq.errors.") for i in mods["pymq.protocol.frame"])


def test_walk_resolves_relative_and_from_imports(tmp_path: Path) -> None:
    """Relative imports resolve to absolute names, and ``from pymq import transport`` names the subpackage."""
    pkg = tmp_path / "pymq" / "broker" / "store"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text("from pymq import transport\nfrom ..locks import L\nfrom . import index\n")
    assert imports_of(pkg / "m.py", "pymq.broker.store.m") == {
        "pymq.transport",
        "pymq.broker.locks.L",
        "pymq.broker.store.index",
    }


def test_clock_imports_nothing_of_ours() -> None:
    """pymq.clock is shared by client and broker, so it depends on nothing of ours."""
    bad = offenders({"pymq.clock": imports_of(PKG / "clock.py", "pymq.clock")}, ours)
    assert bad == []


def test_consume_services_never_import_the_consumer() -> None:
    """The consume services get what they need injected: no import of the push consumer or its base."""
    mods = {m: i for m, i in modules("client").items() if m.startswith("pymq.client.consume_")}
    assert set(mods) >= {"pymq.client.consume_service", "pymq.client.consume_concurrent", "pymq.client.consume_orderly"}
    bad = offenders(mods, lambda i: i.startswith(("pymq.client.push_consumer", "pymq.client.consumer_base")))
    assert bad == []


def test_client_builds_broker_requests_only_in_broker_api() -> None:
    """Every request the client sends is built in pymq.client.broker_api (on the typed headers)."""
    users = sorted(
        p.name
        for p in (PKG / "client").glob("*.py")
        if p.name != "broker_api.py" and "Command.request(" in p.read_text()
    )
    assert users == []
