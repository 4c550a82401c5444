"""Where the controller's state lives: a small interface, and a local file for one machine.

The file is replaced atomically (written to a temporary file in the same directory, fsynced,
renamed over the old one, the directory fsynced): a crash leaves the old state or the new,
never a torn one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from pymq.controller.state import GroupState


class StateStore(Protocol):
    """Loads and saves every group's :class:`GroupState`."""

    def load(self) -> dict[str, GroupState]: ...

    def save(self, groups: dict[str, GroupState]) -> None: ...


class FileStateStore:
    """The embedded controller's state in ``<dir>/controller.json``."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / "controller.json"

    def load(self) -> dict[str, GroupState]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return {name: GroupState.from_dict(d) for name, d in data.get("groups", {}).items()}

    def save(self, groups: dict[str, GroupState]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        body = json.dumps({"groups": {n: g.to_dict() for n, g in sorted(groups.items())}}, indent=1)
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["FileStateStore", "StateStore"]
