"""Test modules stand alone: no test_*.py imports another; what they share lives in helper modules
(tests/helpers.py, tests/master_slave.py, tests/store/storeutil.py, ...) or in a conftest.py."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def package_of(path: Path) -> str:
    """The dotted package of a file under tests/ (``tests.client`` for tests/client/x.py)."""
    return ".".join(path.relative_to(TESTS.parent).parent.parts)


def imported_modules(source: str, package: str) -> set[str]:
    """Every module ``source`` imports, as a dotted name (relative imports resolved against ``package``).

    ``from tests.a import b`` counts both ``tests.a`` and ``tests.a.b`` (b may be a module).
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def test_no_test_module_imports_another() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 100  # the walk found the suite
    offenders = [
        f"{path.relative_to(TESTS.parent)} imports {name}"
        for path in files
        for name in sorted(imported_modules(path.read_text(), package_of(path)))
        if is_test_module(name)
    ]
    assert offenders == []


def test_the_check_sees_each_form_of_import() -> None:
    """Absolute, ``import``, ``from package import module`` and relative forms are all caught; helpers are not."""
    package = package_of(TESTS / "integration" / "test_probe.py")
    for source in (
        "from tests.integration.test_replication import add_slave",
        "import tests.integration.test_replication",
        "from tests.integration import test_replication",
        "from .test_replication import add_slave",
    ):
        assert "tests.integration.test_replication" in imported_modules(source, package), source
    helpers = "from tests.master_slave import add_slave\nfrom tests.helpers import wait_until\nfrom . import conftest"
    assert not any(is_test_module(n) for n in imported_modules(helpers, package))
