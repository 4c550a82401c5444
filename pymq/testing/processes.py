"""Real daemon processes for integration tests: started on ephemeral ports, stopped by PID.

The daemons write their bound address to ``--port-file`` once they serve; these helpers
wait for that file, so tests never guess ports or sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class DaemonProcess:
    """One ``pymq-namesrv`` or ``pymq-broker`` child process."""

    def __init__(self, kind: str, args: list[str], workdir: Path, *, env: dict[str, str] | None = None) -> None:
        self.kind = kind
        self.args = args
        self.workdir = workdir
        self.env = {**os.environ, **(env or {})}
        self.port_file = workdir / f"{kind}-{os.urandom(4).hex()}.addr"
        self.log_path = workdir / f"{self.port_file.stem}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", f"pymq.cli.{self.kind}", *self.args, "--port-file", str(self.port_file)]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_file.exists() and self.port_file.read_text().strip():
                self.address = self.port_file.read_text().strip()
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"{self.kind} did not start within {timeout}s:\n{self.output()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.running():
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, then SIGKILL if needed; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (a crash): no cleanup runs in the child."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()


def namesrv_process(workdir: Path, *extra: str, env: dict[str, str] | None = None) -> DaemonProcess:
    return DaemonProcess("namesrv", ["--host", "127.0.0.1", "--port", "0", *extra], workdir, env=env)


def broker_process(
    workdir: Path, namesrv: str, broker_name: str, *extra: str, env: dict[str, str] | None = None
) -> DaemonProcess:
    store = workdir / broker_name
    args = [
        "--host", "127.0.0.1", "--port", "0", "--namesrv", namesrv, "--broker-name", broker_name,
        "--store-dir", str(store), "--small-files", *extra,
    ]  # fmt: skip
    return DaemonProcess("broker", args, workdir, env=env)
