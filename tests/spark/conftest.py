"""Spark fixtures: one SparkSession and one pymq cluster (in a background thread) per test session."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must use this venv
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

HAVE_JAVA = shutil.which("java") is not None


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    # On a developer's machine without a JVM they are skipped; in CI (.ci/run installs
    # one) a missing JVM must not pass as green, so the fixture fails there instead.
    if HAVE_JAVA or os.environ.get("CI") == "true":
        return
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


SKIP_REASON = "Spark tests need Java 17 or 21 on the PATH"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say why in the summary, not only with ``-rs``: "25 skipped" alone hides it."""
    if HAVE_JAVA:
        return
    here, root = Path(__file__).resolve().parent, terminalreporter.config.rootpath
    reports = terminalreporter.stats.get("skipped", [])
    skipped = [r for r in reports if here in (root / r.nodeid.split("::")[0]).resolve().parents]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} Spark tests skipped: {SKIP_REASON} (Debian: openjdk-17-jre-headless; "
            "under CI=true they fail instead)",
            yellow=True,
        )


class ClusterThread:
    """A LocalCluster on its own event loop thread, reachable from Spark's worker processes."""

    def __init__(self, base: Path, **kwargs: Any) -> None:
        from pymq.testing import LocalCluster

        self.loop = asyncio.new_event_loop()
        self.cluster = LocalCluster(base, **kwargs)
        self.thread = threading.Thread(target=self.loop.run_forever, name="pymq-test-cluster", daemon=True)
        self.thread.start()
        self.call(self.cluster.start())

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr

    def create_topic(self, topic: str, queues: int = 2) -> None:
        self.call(self.cluster.create_topic(topic, queues))

    def close(self) -> None:
        self.call(self.cluster.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="session")
def pymq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    c = ClusterThread(tmp_path_factory.mktemp("spark-cluster"), brokers=2)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[ClusterThread]:
    """A one-broker cluster of the test's own, with 1 MiB commitlog files: for tests that damage the store."""
    c = ClusterThread(tmp_path / "cluster", brokers=1, store={"commitlog_file_size": 1 << 20})
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not HAVE_JAVA:
        pytest.fail("CI=true but no java on the PATH: the Spark tests cannot run (.ci/run installs one)")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pymq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .config("spark.log.structuredLogging.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from pymq.spark_connector import register

    register(session)  # auto-registration needs a non-editable install (see docs/SPARK.md)
    try:
        yield session
    finally:
        for q in session.streams.active:
            q.stop()
        session.stop()
