"""``pymq-local``: one nameserver and one broker in this process, for trying pymq out.

Runs in the foreground, prints where it listens and how to send and receive a first
message, and stops both cleanly on Ctrl-C (or SIGTERM). Unlike a plain ``pymq-broker``, its
broker creates unknown topics on first use (``auto_create_topic``). Shutdown never depends
on stdout: with ``pymq-local | tee log`` a Ctrl-C kills ``tee`` first, and the stop messages
are then dropped, not raised.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pymq.cli.common import EXIT_OK, startup_error, startup_failure, version_option
from pymq.config import SMALL_STORE_SIZES, BrokerConfig, NamesrvConfig, StoreConfig
from pymq.errors import ConfigError, PymqError, StoreLockedError
from pymq.logs import configure_logging
from pymq.transport.loop import run

if TYPE_CHECKING:
    from pymq.broker.app import BrokerApp
    from pymq.dashboard.server import DashboardServer

GUIDE = """
pymq is running.
  nameserver  {ns}
  broker      {broker}  (store: {store})
  dashboard   {dashboard}
  gRPC        {grpc}  (RocketMQ 5.x clients: apache.rocketmq.v2, plaintext)

Topics are created on first use here, with {queues} queues: the first send, subscription, pull or
pop of a topic (any client's route lookup) creates it. A plain pymq-broker needs pymq-admin topic-create.
Try it from another terminal (with the virtualenv's bin/ on your PATH):
  pymq-admin --namesrv {ns} topic-create --topic hello --queues 4
  pymq-admin --namesrv {ns} send --topic hello --body 'hi there' --keys greeting-1
  pymq-admin --namesrv {ns} consume --topic hello --count 1
  pymq-admin --namesrv {ns} query-key --topic hello --key greeting-1

Or from Python:
  import asyncio
  from pymq.client import Message, Producer
  async def main():
      async with Producer("{ns}") as producer:
          print(await producer.send(Message("hello", b"hi from Python")))
  asyncio.run(main())

Press Ctrl-C to stop.
"""


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default="127.0.0.1", show_default=True, help="Address both servers listen on.")
@click.option("--namesrv-port", default=9876, show_default=True)
@click.option("--broker-port", default=10911, show_default=True)
@click.option(
    "--grpc-port",
    default=8081,
    show_default=True,
    help="Port of the RocketMQ 5.x gRPC endpoint (apache.rocketmq.v2.MessagingService); 0: not served.",
)
@click.option("--store-dir", default="./pymq-local-store", show_default=True, type=click.Path(file_okay=False))
@click.option(
    "--dashboard-port",
    default=8080,
    show_default=True,
    help="The web dashboard's port (in use: any free port, printed in the banner).",
)
@click.option("--no-dashboard", is_flag=True, help="Do not start the web dashboard.")
@click.option("--log-level", default="warning", show_default=True)
@click.option(
    "--replicas",
    type=click.IntRange(1, 2),
    default=1,
    show_default=True,
    help="2: a master and a slave as child processes, automatic failover on (the controller runs here).",
)
@version_option
def main(
    host: str,
    namesrv_port: int,
    broker_port: int,
    grpc_port: int,
    store_dir: str,
    dashboard_port: int,
    no_dashboard: bool,
    log_level: str,
    replicas: int,
) -> None:
    """Start a local pymq cluster (one nameserver, one broker, the web dashboard) in the foreground.

    \b
    Example:
      pymq-local
      pymq-local --namesrv-port 19876 --broker-port 20911 --store-dir /tmp/pymq --no-dashboard
      pymq-local --grpc-port 0          # no RocketMQ 5.x gRPC endpoint
      pymq-local --replicas 2       # a master and its slave; kill -9 the master and the slave takes over
    """
    configure_logging(log_level)
    if replicas == 2:
        from pymq.cli.local_replicas import serve_replicated

        sys.exit(run(serve_replicated(host, namesrv_port, broker_port, Path(store_dir), say)))
    dashboard = None if no_dashboard else dashboard_port
    sys.exit(run(_serve(host, namesrv_port, broker_port, grpc_port, Path(store_dir), dashboard)))


async def _serve(
    host: str, namesrv_port: int, broker_port: int, grpc_port: int, store_dir: Path, dashboard_port: int | None
) -> int:
    from pymq.broker.app import BrokerApp
    from pymq.grpc_proxy import GrpcProxy
    from pymq.nameserver.app import NamesrvApp

    namesrv = NamesrvApp(NamesrvConfig(host=host, port=namesrv_port))
    try:
        await namesrv.start()
    except (ConfigError, OSError) as exc:
        message, code = startup_failure(exc)
        startup_error(message)
        return code
    broker_cfg = BrokerConfig(
        host=host,
        port=broker_port,
        advertised_host=host if host != "0.0.0.0" else None,
        namesrv_addrs=[namesrv.address],
        # No slaves here: the HA listener takes any free port, not the broker port + 1 (which
        # anything else may hold: a test's or a user's pymq-local failed to start on it).
        ha_port=0,
        auto_create_topic=True,
        store=StoreConfig(store_dir=store_dir, **SMALL_STORE_SIZES),
    )
    broker = BrokerApp(broker_cfg)
    try:
        await broker.start()
    except (ConfigError, StoreLockedError, OSError) as exc:
        await namesrv.close()
        message, code = startup_failure(exc)
        startup_error(message)
        return code
    namesrv.handlers.create_unknown_topic = functools.partial(create_on_first_use, broker)
    proxy: GrpcProxy | None = None
    if grpc_port:
        proxy = GrpcProxy(namesrv.address, host=host, port=grpc_port)
        try:
            await proxy.start()
        except (ConfigError, OSError) as exc:
            await broker.close()
            await namesrv.close()
            message, code = startup_failure(exc)
            startup_error(message)
            return code
    dashboard = await start_dashboard(host, namesrv.address, dashboard_port) if dashboard_port is not None else None
    try:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        guide = GUIDE.format(
            ns=namesrv.address,
            broker=broker.address,
            store=store_dir.resolve(),
            queues=broker_cfg.default_topic_queue_nums,
            dashboard=dashboard.url if dashboard is not None else "off (--no-dashboard)",
            grpc=f"{proxy.advertised_host}:{proxy.port}" if proxy is not None else "off (--grpc-port 0)",
        )
        say(guide, nl=False)
        await stop.wait()
        say("stopping ...")
    finally:
        # Closed whatever happened above: offsets persisted, the store marked clean (no abort file).
        if dashboard is not None:
            await dashboard.close()
        if proxy is not None:
            await proxy.close()
        await broker.close()
        await namesrv.close()
    say("stopped.")
    return EXIT_OK


async def start_dashboard(host: str, namesrv: str, port: int) -> DashboardServer:
    """The dashboard for this cluster on ``port``, or on any free port when that one is taken."""
    from pymq.config import DashboardConfig
    from pymq.dashboard.server import DashboardServer

    try:
        server = DashboardServer(DashboardConfig(host=host, port=port, namesrv_addrs=[namesrv]))
        await server.start()
    except ConfigError:
        server = DashboardServer(DashboardConfig(host=host, port=0, namesrv_addrs=[namesrv]))
        await server.start()
    return server


async def create_on_first_use(broker: BrokerApp, topic: str) -> bool:
    """A route lookup of an unknown topic: create it on the broker as a send would, register, say yes.

    Internal topics (``%RETRY%…``, ``%DLQ%…``, ``rmq_sys_…``, the default topic) and names a send
    would refuse are not created here."""
    from pymq.broker.topics import validate_topic_name
    from pymq.protocol.requests import AUTO_CREATE_TOPIC

    if topic.startswith(("%", "rmq_sys_")) or topic == AUTO_CREATE_TOPIC:
        return False
    try:
        validate_topic_name(topic, broker.config.store.max_topic_length)
    except PymqError:
        return False
    if broker.topics.get(topic) is None and broker.topics.auto_create_for_send(topic) is None:
        return False
    return await broker.registrar.register_all() > 0


def say(text: str, *, nl: bool = True) -> None:
    """Print to stdout if it is still there: a closed pipe (``| tee`` killed by Ctrl-C) is not an error."""
    try:
        click.echo(text, nl=nl)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so later writes and the flush at exit do not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


if __name__ == "__main__":
    main()
