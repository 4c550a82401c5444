"""The ACL accounts, read and edited by an admin (issue 33's dashboard; ``pymq-admin acl-*``).

GET_ACL_ACCOUNTS (54): the accounts this broker enforces, never their secret keys, and whether
this broker can edit its ACL file (``writable``). UPDATE_AND_CREATE_ACL_CONFIG (50) and
DELETE_ACL_CONFIG (51): one account created or replaced / deleted in the ACL file (the change
itself is :mod:`pymq.security.acl_edit`'s), then the file is reloaded at once. Admin requests
(see :mod:`pymq.security.permissions`); refused when ACL is off or the file cannot be written.

The write is atomic: a temporary file next to the ACL file, fsynced, renamed over it (a daemon
reading it, this one or another sharing the file, sees the old or the new file, never half
of one). The file I/O runs in a thread; one edit at a time per broker.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymq.errors import InvalidRequestError
from pymq.protocol.codes import RequestCode, ResponseCode
from pymq.protocol.command import Command
from pymq.protocol.headers import decode_body, encode_body
from pymq.security.acl import AclFileError
from pymq.security.acl_edit import delete_account, dump_acl, upsert_account
from pymq.transport.channel import Channel
from pymq.transport.dispatch import Handler

if TYPE_CHECKING:
    from pymq.security.interceptor import AclInterceptor


def acl_file_writable(path: Path) -> bool:
    """Can this process replace ``path`` (write its directory, and the file itself if it exists)?"""
    return os.access(path.parent, os.W_OK | os.X_OK) and (not path.exists() or os.access(path, os.W_OK))


def write_atomically(path: Path, text: str) -> None:
    """``text`` as ``path``'s new content: a temporary file in the same directory, fsynced, renamed over it."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def edit_acl_file(path: Path, change: Callable[[dict[str, Any]], tuple[dict[str, Any], bool]]) -> bool:
    """Read the ACL file, apply ``change``, write the result if it changed anything; ``change``'s flag."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    after, flag = change(doc)
    if after is not doc:
        write_atomically(path, dump_acl(after))
    return flag


class AclHandlers:
    def __init__(self, *, acl: Callable[[], AclInterceptor | None]) -> None:
        #: the broker's ACL interceptor (None: ACL is off); read per request, it is made after the handlers
        self.acl = acl
        self._edits = asyncio.Lock()

    def table(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ACL_ACCOUNTS: self.accounts,
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update,
            RequestCode.DELETE_ACL_CONFIG: self.delete,
        }

    def accounts(self, cmd: Command, channel: Channel) -> Command:
        """The accounts without secrets (``enabled`` false: ACL is off); ``writable``: can be edited here."""
        acl = self.acl()
        if acl is None:
            return cmd.response(body=encode_body({"enabled": False, "accounts": [], "writable": False}))
        body = {"enabled": True, "accounts": acl.acl.describe(), "writable": acl_file_writable(acl.path)}
        return cmd.response(body=encode_body(body))

    async def update(self, cmd: Command, channel: Channel) -> Command:
        body = decode_body(cmd.body, "ACL account")
        if not isinstance(body, dict):
            raise InvalidRequestError("the ACL account must be a map")
        result = await self._edit(cmd, lambda doc: upsert_account(doc, body))
        if isinstance(result, Command):
            return result
        return cmd.response(body=encode_body({"accessKey": body.get("accessKey"), "created": result}))

    async def delete(self, cmd: Command, channel: Channel) -> Command:
        access_key = str(cmd.ext.get("accessKey") or "")
        if not access_key:
            raise InvalidRequestError("DELETE_ACL_CONFIG needs accessKey")
        result = await self._edit(cmd, lambda doc: delete_account(doc, access_key))
        if isinstance(result, Command):
            return result
        return cmd.response(body=encode_body({"accessKey": access_key, "deleted": result}))

    async def _edit(
        self, cmd: Command, change: Callable[[dict[str, Any]], tuple[dict[str, Any], bool]]
    ) -> bool | Command:
        acl = self.acl()
        if acl is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "ACL is off on this broker: there is no ACL file to edit")
        if not acl_file_writable(acl.path):
            return cmd.response(ResponseCode.NO_PERMISSION, f"the ACL file {acl.path} is not writable by the broker")
        async with self._edits:
            try:
                flag = await asyncio.to_thread(edit_acl_file, acl.path, change)
            except (AclFileError, tomllib.TOMLDecodeError) as exc:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"ACL not changed: {exc}")
            except OSError as exc:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"ACL file not written: {exc.strerror or exc}")
            await acl.reload_if_changed(force=True)
        return flag
