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
    """pymq.protocol depends only on itself, pymq.errors and the C accelerator (a leaf extension)."""
    bad = offenders(
        modules("protocol"),
        lambda i: ours(i) and not i.startswith(("pymq.protocol.", "pymq.errors.")) and i != "pymq._speedups",
    )
    assert bad == []


def test_only_the_accelerator_module_imports_the_accelerator() -> None:
    """pymq._speedups knows the record layout: only pymq.protocol.accelerator loads it, checked against
    pymq.protocol.record's layout; the others use it as ``record.speedups``."""
    assert (
        offenders(
            {m: i for m, i in modules().items() if m != "pymq.protocol.accelerator"},
            lambda i: i.startswith("pymq._speedups"),
        )
        == []
    )
    assert "pymq._speedups" in modules()["pymq.protocol.accelerator"]
    assert "pymq.protocol.accelerator.load_speedups" in modules()["pymq.protocol.record"]


def test_nothing_else_answers_to_the_accelerators_name() -> None:
    """pymq._speedups is the C extension alone; its sources are in pymq/_speedups_src/ (setup.py compiles them all).

    A pymq/_speedups/ directory would import as an empty namespace package where no .so was built.
    """
    assert not (PKG / "_speedups").exists()
    assert not (PKG / "_speedups.py").exists()
    assert (PKG / "_speedups_src" / "speedups.h").is_file()
    assert (PKG / "_speedups_src" / "module.c").is_file()


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


def test_pop_state_has_no_sockets_or_asyncio() -> None:
    """pymq.broker.pop's state, receipt handles and revival are plain code its handlers and a service call."""
    bad = offenders(
        {m: i for m, i in modules("broker/pop").items() if m != "pymq.broker.pop.handlers"},
        lambda i: (
            i.split(".")[0] in {"asyncio", "uvloop", "socket", "selectors"}
            or i.startswith(("pymq.transport", "pymq.broker.handlers", "pymq.broker.app"))
        ),
    )
    assert bad == []


def test_client_never_imports_server_side() -> None:
    """pymq.client never imports the broker, its store or the nameserver."""
    bad = offenders(modules("client"), lambda i: i.startswith(("pymq.broker", "pymq.nameserver")))
    assert bad == []


def test_client_never_imports_daemon_config_or_cli() -> None:
    """pymq.client (the SDK) never imports pymq.config (pydantic), the CLIs, click or structlog."""
    daemon_side = (["pymq", "config"], ["pymq", "cli"])
    bad = offenders(
        modules("client"),
        lambda i: i.split(".")[:2] in daemon_side or i.split(".")[0] in {"click", "pydantic", "structlog"},
    )
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


def test_only_pymq_otel_imports_opentelemetry_and_nobody_imports_it() -> None:
    """opentelemetry (the optional pymq[otel] extra) is imported only by pymq.otel, which no pymq module imports."""
    others = {m: i for m, i in modules().items() if m != "pymq.otel"}
    assert offenders(others, lambda i: i.split(".")[0] == "opentelemetry" or i.startswith("pymq.otel")) == []
    assert any(i.startswith("opentelemetry") for i in modules()["pymq.otel"])


def test_store_imports_nothing_of_the_broker_around_it() -> None:
    """pymq.broker.store imports no other pymq.broker module (put hooks, schedule ... sit above it)."""
    bad = offenders(
        modules("broker/store"),
        lambda i: i.startswith("pymq.broker.") and not i.startswith("pymq.broker.store."),
    )
    assert bad == []


def test_store_knows_no_delays_or_schedule() -> None:
    """No delay-level, schedule-topic or DELAY-property logic in pymq.broker.store (it is a broker put hook)."""
    words = ("SCHEDULE_TOPIC", "delay_level", "DELAY", "delivery_time", "REAL_TOPIC", "REAL_QID")
    bad = [
        f"{path.relative_to(PKG)}: {word}"
        for path in (PKG / "broker" / "store").rglob("*.py")
        for word in words
        if word in path.read_text()
    ]
    assert bad == []


def test_store_knows_no_transactions() -> None:
    """No half/op topics, transaction properties or transaction types in pymq.broker.store (issue 18:
    the half-message rewrite is a broker put hook, commit/rollback and check-back are broker services)."""
    words = ("TRANS_HALF", "TRANS_OP", "TRANS_CHECK_MAX", "TRAN_MSG", "PGROUP", "SYSFLAG_TX", "transaction")
    bad = [
        f"{path.relative_to(PKG)}: {word}"
        for path in (PKG / "broker" / "store").rglob("*.py")
        for word in words
        if word in path.read_text()
    ]
    assert bad == []


def test_store_knows_no_timers() -> None:
    """Timer, merged-delay and priority rules live in put hooks and services of the broker, never in the store."""
    words = ("TIMER_", "wheel_timer", "MERGE_", "broker.timer", "PRIORITY", "priority")
    bad = [
        f"{path.relative_to(PKG)}: {word}"
        for path in (PKG / "broker" / "store").rglob("*.py")
        for word in words
        if word in path.read_text()
    ]
    assert bad == []


def test_the_plain_client_knows_nothing_of_transactional_sends() -> None:
    """Only the package front and the sync facade import transaction_producer (the plain producer never does)."""
    fronts = {"pymq.client", "pymq.client.sync", "pymq.client.transaction_producer"}
    bad = offenders(
        {m: i for m, i in modules("client").items() if m not in fronts},
        lambda i: i.startswith("pymq.client.transaction_producer"),
    )
    assert bad == []


def test_timer_file_formats_are_pure() -> None:
    """TimerLog, TimerWheel, their recovery and the checkpoint: no asyncio, sockets or transport, no app."""
    pure = {f"pymq.broker.timer.{m}" for m in ("timer_log", "timer_wheel", "timer_store", "checkpoint")}
    mods = {m: i for m, i in modules("broker/timer").items() if m in pure}
    assert len(mods) == len(pure)
    bad = offenders(
        mods,
        lambda i: (
            i.split(".")[0] in {"asyncio", "uvloop", "socket", "selectors"}
            or (ours(i) and not i.startswith(("pymq.broker.timer.", "pymq.broker.store.")))
        ),
    )
    assert bad == []


def test_store_services_do_not_import_the_store_facade() -> None:
    """flush, cleanup and recovery see the store through store_view's protocols: no circle with message_store."""
    mods = modules("broker/store")
    bad = offenders(
        {m: i for m, i in mods.items() if m != "pymq.broker.store.message_store" and m != "pymq.broker.store"},
        lambda i: i.startswith("pymq.broker.store.message_store"),
    )
    assert bad == []


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


def handler_modules() -> dict[str, set[str]]:
    mods = modules()
    # the core families in broker/handlers/, each feature's in its package (broker/<feature>/handlers.py)
    return {
        m: i
        for m, i in mods.items()
        if m.startswith("pymq.broker.handlers.")
        or (m.startswith("pymq.broker.") and m.endswith(".handlers"))
        or m in ("pymq.nameserver.handlers", "pymq.broker.retry.sendback")
    }


def test_handlers_see_channels_not_connections_or_codecs() -> None:
    """Request handlers never import the frame codec, the codec seam, Connection, the server or the app."""
    forbidden = (
        "pymq.protocol.frame",
        "pymq.transport.codec",
        "pymq.transport.connection",
        "pymq.transport.server",
        "pymq.transport.client",
        "pymq.broker.app",
    )
    handlers = handler_modules()
    assert len(handlers) >= 9
    assert offenders(handlers, lambda i: i.startswith(forbidden)) == []


def test_dispatch_and_connection_do_not_know_each_other() -> None:
    """The dispatcher works on the Channel interface; a connection hands requests to a RequestSink."""
    mods = modules("transport")
    assert offenders({"d": mods["pymq.transport.dispatch"]}, lambda i: i.startswith("pymq.transport.connection")) == []
    assert offenders({"c": mods["pymq.transport.connection"]}, lambda i: i.startswith("pymq.transport.dispatch")) == []


def test_transport_is_codec_agnostic() -> None:
    """Only transport.codec (the default codec) imports the frame codec; connection and dispatch use the seam."""
    mods = {m: i for m, i in modules("transport").items() if m != "pymq.transport.codec"}
    assert offenders(mods, lambda i: i.startswith("pymq.protocol.frame")) == []


def test_only_the_wiring_knows_the_daemon_apps() -> None:
    """Broker parts, nameserver parts and metrics never import the app that wires them (no app <-> part circles)."""
    mods = {
        m: i
        for m, i in modules().items()
        if m.startswith(("pymq.broker.", "pymq.nameserver.", "pymq.metrics"))
        and m not in ("pymq.broker.app", "pymq.nameserver.app")
    }
    assert offenders(mods, lambda i: i.startswith(("pymq.broker.app", "pymq.nameserver.app"))) == []


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


def test_signing_and_acl_rules_are_pure() -> None:
    """Signing, the ACL model and the permission table open no sockets and know no event loop
    or transport (only the interceptor and the daemon wiring do)."""
    mods = modules("security")
    pure = {k: v for k, v in mods.items() if k.rsplit(".", 1)[-1] in {"signing", "acl", "permissions"}}
    assert len(pure) == 3
    bad = offenders(
        pure,
        lambda i: (
            i.split(".")[0] in {"asyncio", "uvloop", "socket", "ssl", "selectors"}
            or i.startswith(("pymq.transport", "pymq.config", "pymq.broker", "pymq.nameserver"))
        ),
    )
    assert bad == []


def test_security_never_imports_the_broker_or_nameserver() -> None:
    """ACL enforcement knows no broker or store: what only the broker can find (END_TRANSACTION's
    topic from its half message) it passes in as resolvers (``security.permissions.Resolver``)."""
    bad = offenders(modules("security"), lambda i: i.startswith(("pymq.broker", "pymq.nameserver")))
    assert bad == []


def test_client_security_needs_no_daemon_parts() -> None:
    """The SDK's credentials/TLS options use signing and transport.tls, never the daemons' config."""
    bad = offenders(
        {k: v for k, v in modules("client").items()},
        lambda i: i.startswith(("pymq.security.daemon", "pymq.security.interceptor", "pymq.config")),
    )
    assert bad == []


def test_replication_pure_parts_do_no_io() -> None:
    """broker/ha's codec, epoch check and ack bookkeeping are sans-IO: no event loop, sockets or transport."""
    pure = {k: v for k, v in modules("broker/ha").items() if k.rsplit(".", 1)[-1] in {"codec", "epochs", "acks"}}
    assert len(pure) == 3
    bad = offenders(
        pure,
        lambda i: (
            i.split(".")[0] in {"asyncio", "uvloop", "socket", "selectors", "ssl"}
            or i.startswith("pymq.transport")
            or i.startswith("pymq.broker.store")
        ),
    )
    assert bad == []


#: the store's parts: only pymq.broker.store itself touches them (everything else goes through the facade)
STORE_PARTS = frozenset({"commitlog", "appender", "queues", "queue_table", "dispatcher", "map_pool", "lock"})


def test_no_code_outside_the_store_reads_its_parts() -> None:
    """Outside pymq/broker/store, no ``<something>store.<part>`` attribute read: the facade holds."""
    found = []
    store_dir = PKG / "broker" / "store"
    for path in PKG.rglob("*.py"):
        if store_dir in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in STORE_PARTS:
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name.endswith("store"):
                    found.append(f"{path.relative_to(PKG)}:{node.lineno} {name}.{node.attr}")
    assert found == []


def test_no_code_outside_the_store_knows_consume_queue_entries() -> None:
    """Consume-queue entry layouts (CQ_ENTRY, CQ_ENTRY_SIZE) are the store's: nothing else imports them."""
    bad = offenders(
        {m: i for m, i in modules().items() if not m.startswith("pymq.broker.store")},
        lambda i: i.endswith((".CQ_ENTRY", ".CQ_ENTRY_SIZE")),
    )
    assert bad == []


#: managers' own tables, which request handlers read and change through the managers' methods only
MANAGER_TABLES = {
    "topics": {"topics"},
    "consumers": {"groups", "pull_owners"},
    "subscription_groups": {"groups"},
    "offsets": {"table"},
}


def test_handlers_do_not_reach_into_managers_tables() -> None:
    """No handler reads or writes a manager's dict (``topics.topics``, ``consumers.pull_owners`` ...)."""
    found = []
    for module in handler_modules():
        path = PKG.parent / (module.replace(".", "/") + ".py")
        if not path.exists():  # a package: its __init__
            path = path.with_suffix("") / "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute | ast.Name):
                owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
                if node.attr in MANAGER_TABLES.get(owner, ()):
                    found.append(f"{module}:{node.lineno} {owner}.{node.attr}")
    assert found == []


def test_the_dashboard_reaches_the_cluster_only_through_the_admin_client() -> None:
    """pymq.dashboard reads the admin RPCs (pymq.client) like pymq-admin: no broker, nameserver, store or
    transport of its own; only the CLIs (pymq-dashboard, pymq-local) import it; only it imports the web stack."""
    mods = modules()
    dashboard = {m: i for m, i in mods.items() if m.startswith("pymq.dashboard")}
    assert dashboard, "the walk found no pymq.dashboard modules"
    assert (
        offenders(
            dashboard,
            lambda i: i.startswith(("pymq.broker.", "pymq.nameserver.", "pymq.transport.", "pymq.cli.", "pymq.store")),
        )
        == []
    )
    others = {m: i for m, i in mods.items() if not m.startswith(("pymq.dashboard", "pymq.cli."))}
    assert offenders(others, lambda i: i.startswith("pymq.dashboard")) == []
    web = {"starlette", "uvicorn", "jinja2", "itsdangerous", "multipart"}
    assert offenders(others, lambda i: i.split(".")[0] in web) == []


def test_controller_pure_parts_do_no_io_and_know_no_daemon() -> None:
    """pymq.controller's state, election, leases, leadership and core are pure (issue 32): no event loop, sockets,
    transport or files; and the whole controller never imports the broker or the nameserver."""
    mods = modules("controller")
    names = {"state", "election", "leases", "leadership", "core"}
    pure = {k: v for k, v in mods.items() if k.rsplit(".", 1)[-1] in names}
    assert len(pure) == 5
    bad = offenders(
        pure,
        lambda i: (
            i.split(".")[0] in {"asyncio", "uvloop", "socket", "selectors", "ssl", "os", "json"}
            or i.startswith(("pymq.transport", "pymq.protocol"))
        ),
    )
    assert bad == []
    assert offenders(mods, lambda i: i.startswith(("pymq.broker", "pymq.nameserver"))) == []


def test_grpc_proxy_is_a_front_end_nobody_but_the_cli_imports() -> None:
    """pymq.grpc_proxy talks to brokers as a client does: never imports broker/store/nameserver code,
    and only the CLI (pymq-local, pymq-proxy) imports it; grpc and protobuf stay inside it."""
    inside = modules("grpc_proxy")
    assert inside, "pymq/grpc_proxy has no modules"
    assert offenders(inside, lambda i: i.startswith(("pymq.broker", "pymq.nameserver", "pymq.cli."))) == []
    outside = {m: i for m, i in modules().items() if not m.startswith(("pymq.grpc_proxy", "pymq.cli."))}
    assert offenders(outside, lambda i: i.startswith("pymq.grpc_proxy")) == []
    assert offenders(outside, lambda i: i.split(".")[0] == "grpc" or i.startswith("google.protobuf")) == []


def test_grpc_proxy_mapping_is_pure() -> None:
    """The protobuf <-> pymq mapping does no I/O (the service module does)."""
    imps = modules("grpc_proxy")["pymq.grpc_proxy.mapping"]
    io = ("asyncio", "socket", "grpc", "pymq.transport", "pymq.client")
    assert sorted(i for i in imps if i.split(".")[0] in io or i.startswith(io)) == []


def test_remoting_codec_is_pure_and_imports_only_errors() -> None:
    """pymq.remoting (RocketMQ 4.x wire format) imports nothing of ours but itself, pymq.errors and the pure
    pymq.protocol (the model it maps onto), and does no I/O."""
    mods = modules("remoting")
    assert mods, "pymq.remoting is missing"
    bad = offenders(
        mods,
        lambda i: (
            (ours(i) and not i.startswith(("pymq.remoting.", "pymq.errors.", "pymq.protocol.")))
            or i.split(".")[0] in {"asyncio", "uvloop", "socket", "selectors", "ssl"}
        ),
    )
    assert bad == []


def test_nothing_awaits_with_asyncio_wait_for() -> None:
    """``asyncio.wait_for`` can swallow a cancellation on Python 3.11 (a stopped loop goes on, its
    stopper waits for ever): pymq awaits with a timeout through ``pymq.tasks.wait_within``."""
    offenders_ = [
        str(path.relative_to(PKG))
        for path in sorted(PKG.rglob("*.py"))
        if "asyncio.wait_for(" in path.read_text() and "/pb/" not in str(path)
    ]
    assert offenders_ == []
