"""Receipt handles: opaque to clients, signed by the broker, verified on every ack.

A handle names the checkpoint a message was popped under (its commitlog offset, the
checkpoint's identity), the message's index in it, its queue offset and its deadline
(pop time + invisible time), for one group and topic. The key is a secret the broker keeps
in its store directory (``config/pop.secret``, made on first start): a forged or altered
handle, or one from another broker group's store, fails verification; handles survive
restarts. The secret is the broker group's: a slave copies its master's (GET_POP_SECRET, with
the rest of its metadata) and keeps it in the same file, so that once promoted it verifies the
handles its old master issued (issue 32).

Version 2 (issued now): ``<checkpoint part>.<index>.<queue offset>``. The checkpoint part is a
16-byte keyed BLAKE2b MAC followed by the checkpoint's fields packed in binary (a fixed struct,
then group and topic), base64url-encoded; it is the same for every message of one popped batch,
so a pop signs once per batch and acks verify it at most once (:class:`HandleSigner` remembers
the parts it signed or verified, a bounded number). The index and queue offset are not signed:
they only choose among the messages of the signed checkpoint, which were all handed to the same receiver in one answer
(an altered index names a message the holder was given anyway, and the broker checks the queue
offset against its checkpoint). Version 1 (one MAC over every field of one message, no dots)
is still read: handles issued before an upgrade stay valid.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_VERSION = 1
_VERSION_2 = 2
#: the secret's file in the store's config directory
SECRET_FILE = "pop.secret"
_MAC_BYTES = 16
#: version, queue id, queue offset, ck offset, index, pop time, invisible ms, revive qid, group len, topic len
_FIXED = struct.Struct(">BiqqHqiHHH")
#: version 2's checkpoint part: version, queue id, ck offset, pop time, invisible ms, revive qid, group len, topic len
_CK_FIXED = struct.Struct(">BiqqiHHH")
_MAX_DIGITS = 19
#: batches of at least this many handles are first tried as runs of checkpoints (:meth:`HandleSigner._group_runs`)
_RUNS_FROM = 8
#: verified checkpoint parts remembered (a batch ack verifies its batch's part once)
_VERIFIED_MAX = 4096


@dataclass(slots=True)  # (not frozen: a frozen dataclass's __init__ costs several times more, per acked message)
class ReceiptHandle:
    """The fields of one message's handle."""

    group: str
    #: the topic the message was popped from (the topic or the group's pop retry topic)
    topic: str
    queue_id: int
    queue_offset: int
    #: commitlog offset of the checkpoint record (its identity)
    ck_offset: int
    #: the message's bit in the checkpoint
    index: int
    pop_time: int
    invisible_ms: int
    revive_qid: int

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms


@dataclass(slots=True)
class CheckpointAcks:
    """The handles of one batch ack that name one checkpoint: verified, and checked against their
    checkpoint, once for all of them (a popped batch is usually acked as a batch)."""

    group: str
    topic: str
    queue_id: int
    ck_offset: int
    pop_time: int
    invisible_ms: int
    revive_qid: int
    #: per handle, in the batch's order: its position in the batch, its index in the checkpoint
    #: and the queue offset it names
    positions: list[int]
    indexes: list[int]
    queue_offsets: list[int]

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms


def write_secret(config_dir: Path, secret: bytes) -> None:
    """Replace ``config_dir/pop.secret`` atomically (mode 0600, fsynced)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / SECRET_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, secret)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class HandleError(Exception):
    """A handle that does not verify (malformed or not signed by this broker)."""


class HandleSigner:
    """Signs and verifies handles with one broker secret."""

    def __init__(self, secret: bytes) -> None:
        if not 16 <= len(secret) <= 64:  # BLAKE2b keys are at most 64 bytes
            raise ValueError("receipt handle secret must be 16..64 bytes")
        self._secret = secret
        #: version 2 checkpoint part (text) -> its fields, for parts that verified
        self._verified: dict[str, tuple[str, str, int, int, int, int, int]] = {}

    @property
    def secret(self) -> bytes:
        return self._secret

    @classmethod
    def from_store(cls, config_dir: Path) -> HandleSigner:
        """The secret in ``config_dir/pop.secret`` (created, mode 0600, when missing)."""
        path = config_dir / SECRET_FILE
        try:
            secret = path.read_bytes()
        except FileNotFoundError:
            write_secret(config_dir, os.urandom(32))
            secret = path.read_bytes()
        return cls(secret)

    def adopt(self, secret: bytes, config_dir: Path) -> bool:
        """Sign and verify with ``secret`` from now on, kept in ``config_dir`` (a slave taking its
        master's); False if it is the secret already."""
        if secret == self._secret:
            return False
        type(self)(secret)  # checks the length
        write_secret(config_dir, secret)
        self._secret = secret
        self._verified.clear()  # (verified with the old secret)
        return True

    def _mac(self, payload: bytes) -> bytes:
        return hashlib.blake2b(payload, key=self._secret, digest_size=_MAC_BYTES).digest()

    def checkpoint_part(
        self, group: str, topic: str, queue_id: int, ck_offset: int, pop_time: int, invisible_ms: int, revive_qid: int
    ) -> str:
        """The signed part of the version 2 handles of one checkpoint's messages: each handle is
        ``f"{part}.{index}.{queue_offset}"``."""
        g, t = group.encode(), topic.encode()
        payload = (
            _CK_FIXED.pack(_VERSION_2, queue_id, ck_offset, pop_time, invisible_ms, revive_qid, len(g), len(t)) + g + t
        )
        part = base64.urlsafe_b64encode(self._mac(payload) + payload).rstrip(b"=").decode()
        self._remember(part, (group, topic, queue_id, ck_offset, pop_time, invisible_ms, revive_qid))
        return part

    def _remember(self, part: str, fields: tuple[str, str, int, int, int, int, int]) -> None:
        """Known good: signed here, or verified (the acks of a batch need not check it again)."""
        if len(self._verified) >= _VERIFIED_MAX:
            self._verified.clear()
        self._verified[part] = fields

    def encode(self, h: ReceiptHandle) -> str:
        """The (version 2) handle text of one message."""
        part = self.checkpoint_part(h.group, h.topic, h.queue_id, h.ck_offset, h.pop_time, h.invisible_ms, h.revive_qid)
        return f"{part}.{h.index}.{h.queue_offset}"

    def encode_v1(self, h: ReceiptHandle) -> str:
        """The version 1 handle text (one MAC over every field; issued by earlier versions)."""
        group, topic = h.group.encode(), h.topic.encode()
        payload = (
            _FIXED.pack(
                _VERSION,
                h.queue_id,
                h.queue_offset,
                h.ck_offset,
                h.index,
                h.pop_time,
                h.invisible_ms,
                h.revive_qid,
                len(group),
                len(topic),
            )
            + group
            + topic
        )
        return base64.urlsafe_b64encode(self._mac(payload) + payload).rstrip(b"=").decode()

    def decode(self, text: str) -> ReceiptHandle:
        """The handle's fields; :class:`HandleError` if it is malformed or its signature is wrong."""
        if "." not in text:
            return self._decode_v1(text)
        pieces = text.split(".")
        if len(pieces) != 3:
            raise HandleError("malformed receipt handle")
        part, index, offset = pieces
        if not _numbers(index, offset):
            raise HandleError("malformed receipt handle")
        group, topic, qid, ck, pop_time, invisible, rqid = self._part_fields(part)
        return ReceiptHandle(group, topic, qid, int(offset), ck, int(index), pop_time, invisible, rqid)

    def group_by_checkpoint(self, texts: Sequence[str]) -> tuple[list[CheckpointAcks], dict[int, HandleError]]:
        """The handles of a batch ack, grouped by the checkpoint they name (each signed part is
        verified once), and the positions of those that do not verify, with why."""
        # (below a few handles the one-by-one loop costs less than the set-up of the runs)
        grouped = self._group_runs(texts) if len(texts) >= _RUNS_FROM else None
        return grouped or self._group_each(texts)

    def _group_each(self, texts: Sequence[str]) -> tuple[list[CheckpointAcks], dict[int, HandleError]]:
        """:meth:`group_by_checkpoint`, handle by handle (any batch)."""
        groups: dict[str, CheckpointAcks] = {}
        singles: list[CheckpointAcks] = []  # version 1 handles: one group each
        errors: dict[int, HandleError] = {}
        for pos, text in enumerate(texts):
            pieces = text.split(".")
            if len(pieces) == 3:
                part, index, offset = pieces
                if _numbers(index, offset):
                    g = groups.get(part)
                    if g is not None:
                        g.positions.append(pos)
                        g.indexes.append(int(index))
                        g.queue_offsets.append(int(offset))
                        continue
                    try:
                        fields = self._part_fields(part)
                    except HandleError as exc:
                        errors[pos] = exc
                        continue
                    groups[part] = CheckpointAcks(*fields, [pos], [int(index)], [int(offset)])
                    continue
            try:  # a version 1 handle, or a malformed one (decode says why)
                h = self.decode(text)
            except HandleError as exc:
                errors[pos] = exc
                continue
            fields = (h.group, h.topic, h.queue_id, h.ck_offset, h.pop_time, h.invisible_ms, h.revive_qid)
            singles.append(CheckpointAcks(*fields, [pos], [h.index], [h.queue_offset]))
        return [*groups.values(), *singles], errors

    def _group_runs(self, texts: Sequence[str]) -> tuple[list[CheckpointAcks], dict[int, HandleError]] | None:
        """:meth:`group_by_checkpoint` without a Python step per handle, for the usual batch: well-formed
        version 2 handles whose checkpoints come in runs (as a receive hands them out). None otherwise,
        or if a part does not verify (the caller then finds which handles are wrong)."""
        try:
            parts, indexes, offsets = zip(*[text.rsplit(".", 2) for text in texts], strict=True)
        except ValueError:  # a handle without two dots (or no handles)
            return None
        digits = "".join(indexes) + "".join(offsets)
        if not (
            digits.isascii()
            and digits.isdigit()
            and min(map(len, indexes)) > 0
            and max(map(len, indexes)) <= _MAX_DIGITS
            and min(map(len, offsets)) > 0
            and max(map(len, offsets)) <= _MAX_DIGITS
        ):
            return None
        index_values, offset_values = list(map(int, indexes)), list(map(int, offsets))
        groups: list[CheckpointAcks] = []
        start = 0
        for part in dict.fromkeys(parts):  # (distinct parts, in order)
            end = start + parts.count(part)
            if parts[start:end].count(part) != end - start:
                return None  # not one run (some of its handles are elsewhere in the batch)
            try:
                fields = self._part_fields(part)
            except HandleError:
                return None
            groups.append(
                CheckpointAcks(*fields, list(range(start, end)), index_values[start:end], offset_values[start:end])
            )
            start = end
        return groups, {}

    def _part_fields(self, part: str) -> tuple[str, str, int, int, int, int, int]:
        """The fields of a version 2 checkpoint part: remembered, or verified now (HandleError if not)."""
        fields = self._verified.get(part)
        return self._verify_part(part) if fields is None else fields

    def _verify_part(self, part: str) -> tuple[str, str, int, int, int, int, int]:
        payload = self._verified_payload(part)
        if len(payload) < _CK_FIXED.size:
            raise HandleError("receipt handle signature does not verify")
        version, qid, ck, pop_time, invisible, rqid, glen, tlen = _CK_FIXED.unpack_from(payload)
        group, topic = _names(payload, version == _VERSION_2, _CK_FIXED.size, glen, tlen)
        fields = (group, topic, qid, ck, pop_time, invisible, rqid)
        self._remember(part, fields)
        return fields

    def _verified_payload(self, text: str) -> bytes:
        """The signed payload of base64url ``text`` (MAC checked); HandleError if it does not verify."""
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HandleError("malformed receipt handle") from exc
        mac, payload = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        if not payload or not hmac.compare_digest(mac, self._mac(payload)):
            raise HandleError("receipt handle signature does not verify")
        return payload

    def _decode_v1(self, text: str) -> ReceiptHandle:
        payload = self._verified_payload(text)
        if len(payload) < _FIXED.size:
            raise HandleError("receipt handle signature does not verify")
        version, qid, qoff, ck, index, pop_time, invisible, rqid, glen, tlen = _FIXED.unpack_from(payload)
        group, topic = _names(payload, version == _VERSION, _FIXED.size, glen, tlen)
        return ReceiptHandle(group, topic, qid, qoff, ck, index, pop_time, invisible, rqid)


def _numbers(index: str, offset: str) -> bool:
    """Are a version 2 handle's index and queue offset ASCII digits, 1 to 19 of them? (int() would
    also take signs, spaces, underscores and other scripts' digits, and refuse very long ones.)"""
    digits = index + offset
    return 0 < len(index) <= _MAX_DIGITS and 0 < len(offset) <= _MAX_DIGITS and digits.isascii() and digits.isdigit()


def _names(payload: bytes, known_version: bool, fixed: int, glen: int, tlen: int) -> tuple[str, str]:
    """The group and topic after a signed payload's fixed part; HandleError if unreadable."""
    try:
        if not known_version or len(payload) != fixed + glen + tlen:
            raise ValueError("version")
        return payload[fixed : fixed + glen].decode(), payload[fixed + glen :].decode()
    except (UnicodeDecodeError, ValueError) as exc:  # signed but unreadable: another version
        raise HandleError("unreadable receipt handle") from exc
