"""How a producer turns messages into records: checks, unique ids, compression, properties.

:class:`ProducerEncoding` is mixed into :class:`~pymq.client.producer.Producer` (its settings
and id generator are the producer's); the single send's hot path in ``Producer.send`` encodes a
plain message through the accelerator's batch encoder and falls back to :meth:`_encode`.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any

from pymq.errors import ClientError, MessageTooLargeError
from pymq.protocol import record as _record
from pymq.protocol.batch_encode import encode_batch
from pymq.protocol.message import Message, Prop, UniqueIdGenerator
from pymq.protocol.record import EMPTY_HOST, SYSFLAG_COMPRESSED, encode_record

__all__ = ["ProducerEncoding"]


class ProducerEncoding:
    """Record encoding of one producer (its settings and unique-id generator)."""

    max_message_size: int
    compress_threshold: int
    compress_level: int
    _ids: UniqueIdGenerator | None
    _born_host: bytes

    def _check(self, msg: Message) -> None:
        if not isinstance(msg.body, (bytes, bytearray, memoryview)):
            raise ClientError(f"message body must be bytes, got {type(msg.body).__name__}")
        if not msg.body:
            raise ClientError("message body is empty")
        if len(msg.body) > self.max_message_size:
            raise MessageTooLargeError(f"message body of {len(msg.body)} bytes exceeds {self.max_message_size}")
        if not msg.topic:
            raise ClientError("message topic is empty")

    def _encode(
        self, msg: Message, topic: bytes | None = None, born_ts: int = 0, extra: bytes = b""
    ) -> tuple[bytes, str]:
        """The record bytes and the unique id of one message.

        ``topic`` (the message's topic, encoded) and ``born_ts`` may be given once for a whole batch.
        ``extra``: encoded properties appended after the message's own (a transactional producer's
        half-message marks; none of their names may be among the message's properties).
        """
        assert self._ids is not None
        born_ts = born_ts or int(time.time() * 1000)
        uniq = self._ids.next_id(born_ts)  # (one clock read for both)
        body = msg.body
        if type(body) is not bytes:
            body = bytes(body)
        sys_flag = 0
        if len(body) > self.compress_threshold:
            packed = zlib.compress(body, self.compress_level)
            if len(packed) < len(body):
                body = packed
                sys_flag |= SYSFLAG_COMPRESSED
        if msg.tags or msg.keys or msg.delay_level > 0 or msg.properties:
            props = self._properties(msg, uniq) + extra
        else:  # the common case: the unique key is the only property
            props = b"UNIQ_KEY\x01" + uniq.encode() + b"\x02" + extra
        topic_b = topic if topic is not None else msg.topic.encode()
        # The accelerator's encode_record directly when built (its Python wrapper takes keywords:
        # a call more per send); the wrapper when it is not, or declines (it then returns no bytes).
        c = _record.speedups
        record: Any = None
        if c is not None:
            record = c.encode_record(
                topic_b, body, props, msg.flag, sys_flag, born_ts, self._born_host, 0, 0, 0, 0, 0, 0, EMPTY_HOST
            )
        if record.__class__ is not bytes:
            record = encode_record(
                topic_b,
                body,
                props,
                flag=msg.flag,
                sys_flag=sys_flag,
                born_timestamp=born_ts,
                born_host=self._born_host,
            )
        if len(record) > self.max_message_size:
            raise MessageTooLargeError(f"encoded message of {len(record)} bytes exceeds {self.max_message_size}")
        return record, uniq

    def _encode_batch(self, messages: Sequence[Message], topic: str) -> tuple[bytes, list[str]]:
        """The records of a batch, concatenated, and their unique ids (checked as :meth:`_check` does)."""
        topic_b = topic.encode()
        born_ts = int(time.time() * 1000)
        ids_gen = self._ids
        if ids_gen is not None:  # (else the loop below fails as it always did)
            plain = encode_batch(
                messages if type(messages) is list else list(messages),
                topic,
                topic_b,
                born_ts,
                self._born_host,
                self.max_message_size,
                self.compress_threshold,
                ids_gen.id_head(),
                ids_gen.counter,
            )
            if plain is not None:  # the common case, in one pass (in C where the accelerator was built)
                return plain
        records = []
        ids = []
        for m in messages:
            if m.topic != topic:
                raise ClientError("all messages of a batch must have the same topic")
            if m.delay_level > 0:
                raise ClientError("delayed messages cannot be sent in a batch")
            self._check(m)
            rec, uniq = self._encode(m, topic_b, born_ts)
            records.append(rec)
            ids.append(uniq)
        total = sum(len(r) for r in records)
        if total > self.max_message_size:
            raise MessageTooLargeError(f"batch of {total} bytes exceeds {self.max_message_size}; send smaller batches")
        return b"".join(records), ids

    @staticmethod
    def _properties(msg: Message, uniq: str) -> bytes:
        parts = [b"UNIQ_KEY\x01", uniq.encode(), b"\x02"]
        if msg.tags:
            parts += [b"TAGS\x01", _prop_value(msg.tags), b"\x02"]
        if msg.keys:
            keys = msg.key_list()
            if keys:
                parts += [b"KEYS\x01", _prop_value(" ".join(keys)), b"\x02"]
        if msg.delay_level > 0:
            parts += [b"DELAY\x01", str(int(msg.delay_level)).encode(), b"\x02"]
        for k, v in msg.properties.items():
            if k in (Prop.UNIQ_KEY, Prop.TAGS, Prop.KEYS, Prop.DELAY):
                continue
            parts += [_prop_value(k), b"\x01", _prop_value(str(v)), b"\x02"]
        return b"".join(parts)


def _prop_value(value: str) -> bytes:
    raw = value.encode()
    if b"\x01" in raw or b"\x02" in raw:
        raise ClientError(f"property value {value!r} contains a reserved control character (\\x01 or \\x02)")
    return raw
