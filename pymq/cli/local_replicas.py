"""``pymq-local --replicas 2``: a nameserver running the failover controller in this process, and a
broker group of a SYNC_MASTER and its slave as two child ``pymq-broker`` processes.

The children run in ``--controller-mode``: kill -9 the master and the controller elects the slave
(about 3 s at the defaults), clients move to it, and this process starts the dead broker again
as a slave, which rejoins under the new master. Ctrl-C stops the children (SIGTERM) and then the
nameserver.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from pymq.cli.common import EXIT_OK, startup_error, startup_failure
from pymq.config import NamesrvConfig
from pymq.errors import ConfigError
from pymq.logs import get_logger
from pymq.tasks import wait_within

log = get_logger("local")

GUIDE = """
pymq is running, with automatic failover.
  nameserver  {ns}  (failover controller state: {ctl})
  broker-a    master {m} (SYNC_MASTER), slave {s}   (stores under {store})

Topics are created on first send. Try it from another terminal:
  pymq-admin --namesrv {ns} send --topic hello --body 'hi there'
  pymq-admin --namesrv {ns} consume --topic hello --count 1000
  pymq-admin --namesrv {ns} controller-status
Kill the master (kill -9 {pid}): the slave is elected within a few seconds, and the killed
broker is started again as its slave.

Press Ctrl-C to stop.
"""


class Child:
    """One ``pymq-broker`` child process, restarted as a slave when it dies."""

    def __init__(self, name: str, args: list[str], workdir: Path) -> None:
        self.name = name
        self.args = args
        self.workdir = workdir
        self.proc: asyncio.subprocess.Process | None = None
        self.address = ""

    async def start(self, extra: list[str], timeout: float = 30.0) -> None:
        port_file = self.workdir / f"{self.name}.addr"
        port_file.unlink(missing_ok=True)
        log_file = open(self.workdir / f"{self.name}.log", "ab")  # noqa: SIM115 - the child holds it
        env = {**os.environ, "PYMQ_HA_PORT": "0"}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pymq.cli.broker", *self.args, *extra, "--port-file", str(port_file),
            stdout=log_file, stderr=asyncio.subprocess.STDOUT, env=env,
        )  # fmt: skip
        log_file.close()
        deadline = asyncio.get_running_loop().time() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.returncode is not None or asyncio.get_running_loop().time() > deadline:
                raise ConfigError(f"{self.name} did not start (see {self.workdir / (self.name + '.log')})")
            await asyncio.sleep(0.05)
        self.address = port_file.read_text().strip()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await wait_within(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def serve_replicated(
    host: str, namesrv_port: int, broker_port: int, store_dir: Path, say: Callable[..., None]
) -> int:
    """Run the nameserver with its controller and the two broker children until SIGINT/SIGTERM."""
    from pymq.nameserver.app import NamesrvApp

    store_dir.mkdir(parents=True, exist_ok=True)
    ctl = store_dir / "controller"
    namesrv = NamesrvApp(NamesrvConfig(host=host, port=namesrv_port, controller="embedded", controller_dir=ctl))
    try:
        await namesrv.start()
    except (ConfigError, OSError) as exc:
        message, code = startup_failure(exc)
        startup_error(message)
        return code
    common = ["--host", host, "--namesrv", namesrv.address, "--broker-name", "broker-a", "--controller-mode",
              "--auto-create-topic", "--small-files"]  # fmt: skip
    children = [
        Child("broker-a-0", [*common, "--port", str(broker_port), "--store-dir", str(store_dir / "broker-a-0")],
              store_dir),
        Child("broker-a-1", [*common, "--port", str(broker_port + 1 if broker_port else 0),
                             "--store-dir", str(store_dir / "broker-a-1")], store_dir),
    ]  # fmt: skip
    roles = [["--role", "SYNC_MASTER"], ["--role", "SLAVE", "--broker-id", "1"]]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        for child, role in zip(children, roles, strict=True):
            await child.start(role)
        pid = children[0].proc.pid if children[0].proc else "?"
        m, s = children[0].address, children[1].address
        say(GUIDE.format(ns=namesrv.address, ctl=ctl, m=m, s=s, store=store_dir.resolve(), pid=pid), nl=False)
        while not stop.is_set():
            waits = [asyncio.ensure_future(c.proc.wait()) for c in children if c.proc is not None]
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait([*waits, stopping], return_when=asyncio.FIRST_COMPLETED)
            for w in (*waits, stopping):
                w.cancel()
            if stop.is_set():
                break
            for i, child in enumerate(children):
                if child.proc is not None and child.proc.returncode is not None:
                    say(f"{child.name} exited ({child.proc.returncode}); starting it again as a slave")
                    await asyncio.sleep(1.0)
                    await child.start(["--role", "SLAVE", "--broker-id", str(i + 1)])
        say("stopping ...")
    except ConfigError as exc:
        startup_error(str(exc))
        return 1
    finally:
        for child in children:
            await child.stop()
        await namesrv.close()
    say("stopped.")
    return EXIT_OK
