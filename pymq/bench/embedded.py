"""A throwaway cluster (one nameserver, one broker) in a child process, for ``--embedded`` runs.

A child process rather than this one, so the broker does not share the benchmark's event
loop and GIL: the figures then mean what they would with a separate broker on this host.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import signal
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: the account an ``--acl`` embedded cluster has (admin, every topic and group)
BENCH_ACCESS_KEY = "pymq-bench"
BENCH_SECRET_KEY = "pymq-bench-secret"
_BENCH_ACL = f"""
[[accounts]]
access_key = "{BENCH_ACCESS_KEY}"
secret_key = "{BENCH_SECRET_KEY}"
admin = true
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"
"""


def _serve(
    conn: Connection,
    store_dir: str,
    flush: str,
    acl_file: str | None = None,
    certs: tuple[str, str, str] | None = None,
    store_settings: dict[str, str] | None = None,
) -> None:
    from pymq.broker.app import BrokerApp
    from pymq.config import SMALL_STORE_SIZES, AclSettings, BrokerConfig, NamesrvConfig, StoreConfig, TlsSettings
    from pymq.logs import configure_logging
    from pymq.nameserver.app import NamesrvApp
    from pymq.transport.loop import run

    configure_logging("warning")

    async def main() -> None:
        acl = AclSettings(enable=acl_file is not None, file=acl_file)
        tls = TlsSettings()
        if certs is not None:
            ca, cert, key = certs
            tls = TlsSettings(enable=True, cert_file=cert, key_file=key, ca_file=ca, client=True)
        ns = NamesrvApp(NamesrvConfig(host="127.0.0.1", port=0, acl=acl, tls=tls))
        await ns.start()
        creds = {"access_key": BENCH_ACCESS_KEY, "secret_key": BENCH_SECRET_KEY} if acl_file else {}
        broker_acl = AclSettings(enable=acl_file is not None, file=acl_file, **creds)
        store = StoreConfig(
            store_dir=store_dir,
            flush_disk_type=flush,
            **{**SMALL_STORE_SIZES, "commitlog_file_size": 256 << 20, **(store_settings or {})},
        )
        broker = BrokerApp(
            BrokerConfig(
                host="127.0.0.1",
                port=0,
                namesrv_addrs=[ns.address],
                auto_create_topic=True,
                store=store,
                acl=broker_acl,
                tls=tls,
            )
        )
        await broker.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        conn.send(ns.address)
        await stop.wait()
        await broker.close()
        await ns.close()

    run(main())


class EmbeddedCluster:
    """``acl``: nameserver and broker enforce ACL; ``tls``: they listen with TLS only (a throwaway
    CA made with openssl); clients use :attr:`client_options`."""

    def __init__(
        self,
        flush: str = "ASYNC_FLUSH",
        *,
        acl: bool = False,
        tls: bool = False,
        store_settings: dict[str, str] | None = None,
    ) -> None:
        self.flush = flush
        #: more [store] settings of the broker (checked here: a bad one fails before the child starts)
        self.store_settings = dict(store_settings or {})
        if self.store_settings:
            from pymq.config import StoreConfig

            StoreConfig.model_validate({"store_dir": ".", **self.store_settings})
        self.acl = acl
        self.tls = tls
        #: what clients of this cluster need (credentials when ``acl``)
        self.client_options: dict[str, Any] = (
            {"access_key": BENCH_ACCESS_KEY, "secret_key": BENCH_SECRET_KEY} if acl else {}
        )
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: Any = None
        self.namesrv = ""

    def __enter__(self) -> EmbeddedCluster:
        self._tmp = tempfile.TemporaryDirectory(prefix="pymq-bench-")
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        certs = None
        if self.tls:
            from pymq.bench.certs import make_server_certs

            try:
                ca, cert, key = make_server_certs(Path(self._tmp.name))
            except BaseException:
                self.__exit__()
                raise
            certs = (str(ca), str(cert), str(key))
            self.client_options.update(tls=True, tls_ca_file=str(ca))
        acl_file = None
        if self.acl:
            acl_file = str(Path(self._tmp.name) / "acl.toml")
            Path(acl_file).write_text(_BENCH_ACL)
        self._proc = ctx.Process(
            target=_serve,
            args=(child, str(Path(self._tmp.name) / "store"), self.flush, acl_file, certs, self.store_settings),
            daemon=True,
        )
        self._proc.start()
        if not parent.poll(60):
            self.__exit__()
            raise RuntimeError("the embedded cluster did not start within 60 s")
        self.namesrv = parent.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()  # SIGTERM: the broker shuts down cleanly
            self._proc.join(30)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
