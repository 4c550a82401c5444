"""JSON config files under ``<storeDir>/config/``: atomic writes with a ``.bak`` fallback.

Standard JSON (quoted keys), unlike RocketMQ's fastjson output that other languages
cannot parse.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pymq.logs import get_logger

log = get_logger("broker.store.config")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temp file, fsync, keep the previous version as ``.bak``, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, sort_keys=True)
    # A unique temp name: two threads saving the same file must not write into one temp file.
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        if path.exists():
            shutil.copyfile(path, path.with_name(path.name + ".bak"))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_json(path: Path) -> None:
    """Delete the file and its ``.bak`` (state that no longer applies); missing files are fine."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        candidate.unlink(missing_ok=True)


def read_json(path: Path) -> Any | None:
    """The file's content, falling back to ``.bak`` when it is missing or corrupt; None if neither loads."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            with open(candidate, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            continue
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            log.warning("config_file_corrupt", path=str(candidate), reason=str(exc))
            continue
    return None
