"""Stand-ins for the transport's side of a dispatcher in tests: a channel that records what is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pymq.protocol.command import Command


class RecordingChannel:
    """A ServerChannel that records what the dispatcher writes and counts slots."""

    def __init__(self, max_parked: int = 64) -> None:
        self.remote_addr = "peer:1"
        self.attrs: dict[str, Any] = {}
        self.inflight = 0
        self.parked = 0
        self.max_parked = max_parked
        self.written: list[Command] = []
        self.pushed: list[Command] = []
        self.is_open = True

    def write_command(self, cmd: Command) -> None:
        self.written.append(cmd)

    def handler_finished(self) -> None:
        self.inflight -= 1

    def unparked(self) -> None:
        self.parked -= 1

    def add_close_callback(self, cb: Callable[[Any], None]) -> None:
        pass

    def push_oneway(self, cmd: Command) -> None:
        self.pushed.append(cmd)

    def close(self) -> None:
        self.is_open = False


def request(code: int, opaque: int) -> Command:
    cmd = Command.request(code)
    cmd.opaque = opaque
    return cmd
