"""The atheris targets: one function of bytes per sans-IO decoder (see fuzz/README.md).

Each target feeds its input to the code under test and lets only that code's documented
errors through; any other exception (or a failed assertion) is a finding, reported by
libFuzzer with the input that caused it. Where two implementations exist (the C accelerator
``pymq._speedups`` and its pure-Python twin, switched by ``pymq.protocol.record.speedups``)
the target runs both and requires the same answer, or the same error type, for every input.

Importing this module imports pymq: import it inside ``atheris.instrument_imports()`` (fuzz/fuzz_one.py
does) so the Python code is instrumented for coverage.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
from google.protobuf.message import DecodeError

from pymq.broker.ha import codec as ha
from pymq.broker.pop.receipt import HandleError, HandleSigner, ReceiptHandle
from pymq.broker.pop.records import CheckPoint, parse_ack
from pymq.broker.store.dispatcher import Dispatcher
from pymq.broker.timer.checkpoint import TimerCheckpoint
from pymq.broker.timer.timer_log import UNIT_SIZE, TimerLog
from pymq.broker.timer.timer_wheel import SLOT_SIZE, TimerWheel
from pymq.client.producer_encoding import ProducerEncoding
from pymq.errors import (
    InvalidRequestError,
    LocalProtocolError,
    MessageDecodeError,
    ProtocolError,
    RemoteProtocolError,
)
from pymq.grpc_proxy import auth
from pymq.grpc_proxy import handlers as grpc_handlers
from pymq.grpc_proxy import mapping as grpc_mapping
from pymq.grpc_proxy.pb import definition_pb2 as gpb
from pymq.grpc_proxy.pb import service_pb2 as spb
from pymq.grpc_proxy.service import MessagingService, ProxySettings
from pymq.protocol import accelerator, record, record_batch
from pymq.protocol import requests as rq
from pymq.protocol.filter import Subscription
from pymq.protocol.frame import Command, FrameDecoder, encode_bytes
from pymq.protocol.headers import encode_body
from pymq.protocol.message import Message, decode_message
from pymq.protocol.route import BrokerData, QueueData, TopicRouteData
from pymq.remoting import command as remoting_command
from pymq.remoting import message_layout, send_header
from pymq.remoting.codes import SerializeType
from pymq.remoting.command import RemotingCommand
from pymq.remoting.wire import RemotingWire
from pymq.security import signing

#: the accelerator as imported (None where it was not built); the targets switch record.speedups
ACCEL = accelerator._speedups


class Divergence(AssertionError):
    """The C accelerator and the pure-Python twin disagree (a finding)."""


def outcome(fn: Callable[..., Any], *args: Any, allowed: tuple[type[BaseException], ...]) -> tuple[str, Any]:
    """``("ok", result)`` or ``("error", type)`` for an allowed error; any other exception propagates."""
    try:
        return "ok", fn(*args)
    except allowed as exc:
        return "error", type(exc)


def differential(fn: Callable[..., Any], *args: Any, allowed: tuple[type[BaseException], ...]) -> Any:
    """``fn(*args)`` with the accelerator and with the pure-Python bodies: same result or same error type."""
    if ACCEL is None:
        return outcome(fn, *args, allowed=allowed)
    saved = record.speedups
    try:
        record.speedups = ACCEL
        fast = outcome(fn, *args, allowed=allowed)
        record.speedups = None
        slow = outcome(fn, *args, allowed=allowed)
    finally:
        record.speedups = saved
    if fast != slow:
        raise Divergence(f"{fn.__qualname__}: accelerator {fast!r} != pure Python {slow!r}")
    return fast


def _u8(data: bytes, i: int) -> int:
    return data[i] if len(data) > i else 0


# --- the frame decoder -----------------------------------------------------------------------------------


def _commands(data: bytes, cuts: list[int]) -> tuple[str, Any]:
    dec = FrameDecoder(max_frame_size=1 << 16)
    cmds: list[Command] = []
    prev = 0
    error: type[BaseException] | None = None
    try:
        for cut in [*cuts, len(data)]:
            cmds += dec.feed(data[prev:cut])
            prev = cut
    except ProtocolError as exc:
        error = type(exc)
    # Bodies are views into the decoder's buffers: read only now, after every feed (they must not have changed).
    out = [(c.code, c.opaque, c.flags, c.remark, c.ext, bytes(c.body)) for c in cmds]
    if error is not None:
        return "error", (out, error)
    assert dec.buffered <= len(data)
    return "ok", (out, dec.buffered)


def frame(data: bytes) -> None:
    """pymq.protocol.frame.FrameDecoder.feed: ProtocolError or commands; fed whole or cut anywhere, the same commands.

    The decoder has a one-frame fast path and a general loop: feeding the bytes in one piece
    and in pieces takes different paths, so the two are this target's differential.
    """
    whole = _commands(data, [])
    step = _u8(data, 0) % 17 + 1
    pieces = _commands(data, list(range(step, len(data), step)))
    if whole[0] == pieces[0] == "error":
        # A feed that meets a bad frame raises, dropping the commands decoded before it in that
        # feed (the connection closes): in pieces, more of them were handed out before the error.
        (w_out, w_err), (p_out, p_err) = whole[1], pieces[1]
        if w_err is not p_err or p_out[: len(w_out)] != w_out:
            raise Divergence(f"frame decoder: whole {whole!r} != in pieces of {step} {pieces!r}")
    elif whole != pieces:
        raise Divergence(f"frame decoder: whole {whole!r} != in pieces of {step} {pieces!r}")


# --- records -------------------------------------------------------------------------------------------

_REC = (MessageDecodeError,)


def _iter_records(buf: bytes) -> list[record.RecordTuple]:
    return list(record.iter_records(buf))


def _iter_records_prefix(buf: bytes) -> tuple[list[record.RecordTuple], type[BaseException] | None]:
    got: list[record.RecordTuple] = []
    try:
        for fields in record.iter_records(buf):
            got.append(fields)
    except MessageDecodeError as exc:
        return got, type(exc)
    return got, None


def _parsed(buf: bytes, pos: int, check_crc: bool) -> tuple[Any, ...]:
    r = record.parse_record(buf, pos, check_crc=check_crc)
    return tuple(getattr(r, name) if name != "body" else bytes(r.body) for name in record.RecordFields.__slots__)


def records(data: bytes) -> None:
    """The record scanners and parsers of pymq.protocol.record (and StoredScan, count_records, whole_records_prefix).

    ``unpack_record`` and ``iter_records`` are differential (accelerator vs pure Python);
    everything else may only raise MessageDecodeError (``whole_records_prefix``: ProtocolError).
    """
    buf = data
    n = len(buf)
    pos = _u8(data, 0) % 64 if n > 1 else 0
    for p in {0, pos}:
        got = differential(record.unpack_record, buf, p, allowed=_REC)
        if got[0] == "ok":
            fields = got[1]
            assert p < fields[13] <= fields[14] <= fields[15] <= fields[16] <= n
            assert fields[16] - p == fields[0]
            parsed = outcome(_parsed, buf, p, False, allowed=_REC)
            assert parsed[0] == "ok", parsed  # unpack_record accepts it: parse_record must too
            assert parsed[1][record.RecordFields.__slots__.index("total_size")] == fields[0]
        for check_crc in (False, True):
            outcome(_parsed, buf, p, check_crc, allowed=_REC)
    differential(_iter_records_prefix, buf, allowed=())
    for p, size in record.iter_spans(buf):
        assert p >= 0 and size >= record.MIN_RECORD_SIZE
    assert len(record.records_before(buf, _u8(data, 1))) <= n
    assert 0 <= record.stored_record_size(buf, pos, n, 0) <= n
    assert record_batch.count_records(buf) >= 1
    scan = record_batch.StoredScan(buf, 0, n, 0, True)
    for p, size, topic_at, props_at, *_ in scan:
        assert 0 <= p < topic_at <= props_at <= p + size <= n
    assert 0 <= scan.pos <= n
    scan.blank_size()  # (any i32: a garbage "blank marker" may announce a negative size, which callers refuse)
    file_size = 1 + _u8(data, 2) * 16
    prefix = outcome(record_batch.whole_records_prefix, buf, _u8(data, 3), file_size, allowed=(ProtocolError,))
    if prefix[0] == "ok":
        assert 0 <= prefix[1] <= n
    assert isinstance(record.decode_properties(buf), dict)
    record.is_record_at(buf, pos)
    record.is_blank_marker(buf, pos)


# --- batch validation ------------------------------------------------------------------------------------

_DISPATCH = Dispatcher.__new__(Dispatcher)
_DISPATCH._tag_codes = {}


def _split(data: bytes, topic: bytes, max_size: int) -> tuple[Any, ...]:
    return tuple(record_batch.split_batch(data, topic, max_size))


def _contains(data: bytes, topic: bytes, max_size: int, needle: bytes) -> bool:
    return record_batch.any_property_contains(data, record_batch.split_batch(data, topic, max_size), needle)


def batch(data: bytes) -> None:
    """pymq.protocol.record_batch.split_batch / any_property_contains: accelerator vs pure Python, no error at all.

    The records it accepts are whole valid records (parse_record with the CRC), and the
    accelerator's property codes of each agree with the dispatcher's Python rule.
    """
    tlen = _u8(data, 0) % 8
    topic = record.topic_field(data[1 : 1 + tlen])
    max_size = 64 + _u8(data, 1) * 32
    body = data[1 + tlen :]
    split = differential(_split, body, topic, max_size, allowed=())[1]
    needle = data[2:4] or b"\x01"
    differential(_contains, body, topic, max_size, needle, allowed=())
    positions, sizes, props_ats, rejected = split
    for i, (p, size, props_at) in enumerate(zip(positions, sizes, props_ats, strict=True)):
        assert 0 <= p < props_at <= p + size <= len(body) and size <= max_size
        record.parse_record(body, p, check_crc=True)
        if ACCEL is not None:
            saved, record.speedups = record.speedups, ACCEL
            try:
                one = record_batch.property_codes_one(body, p, size, props_at, 1000 + i, 7)
            finally:
                record.speedups = saved
            if one is not None:
                tags, keys = _DISPATCH.codes(bytes(body[props_at : p + size]))
                want = (tags, [(zlib.crc32(k, 7), 1000 + i) for k in keys or ()])
                if (one[0], list(one[1])) != want:
                    raise Divergence(f"property_codes_one {one!r} != Dispatcher.codes {want!r}")
    for ordinal, kind, reason in rejected:
        assert ordinal >= 0 and kind in (record_batch.REJECT_ILLEGAL, record_batch.REJECT_PROPERTIES_SIZE) and reason


# --- typed request headers -------------------------------------------------------------------------------


def _header_classes() -> list[type[rq.Header]]:
    # dataclass(slots=True) makes a new class: the one it replaced lingers in __subclasses__ until a collection.
    gc.collect()
    seen: list[type[rq.Header]] = []
    todo = [rq.Header]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen and "from_ext" in sub.__dict__:
                seen.append(sub)
                todo.append(sub)
    return sorted(seen, key=lambda c: c.__module__ + "." + c.__qualname__)


HEADERS = _header_classes()


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:  # not msgpack: the frame decoder refuses it before any header sees it
        return None


def headers(data: bytes) -> None:
    """Every typed header's from_ext (pymq.protocol.requests and siblings): InvalidRequestError or a header.

    The first byte picks the class; the rest is msgpack (what the frame decoder hands the
    handlers). A map is the ext as is; a list gives its items to the class's wire names in order.
    """
    cls = HEADERS[_u8(data, 0) % len(HEADERS)]
    value = _unpack(data[1:])
    if isinstance(value, dict):
        ext = value
    elif isinstance(value, list):
        ext = dict(zip(cls.WIRE.values(), value, strict=False))
    else:
        return
    try:
        header = cls.from_ext(ext)
    except InvalidRequestError as exc:
        assert exc.remark
        return
    back = header.to_ext()
    assert isinstance(back, dict)
    again = cls.from_ext(back)  # what we send, we parse back to the same header
    assert again == header, (header, again)
    for f in dataclasses.fields(header):  # type: ignore[arg-type]
        v = getattr(header, f.name)
        if type(v) is int:
            lo, hi = f.metadata.get("range", (-(2**63), 2**63 - 1))
            assert lo <= v <= hi, (f.name, v)


# --- the signing canonical form --------------------------------------------------------------------------


def signing_target(data: bytes) -> None:
    """pymq.security.signing: canonical() of any decoded ext never raises; what is signed verifies after the wire.

    The ext is msgpack from the input (as a server decodes it); signing it, encoding the
    command, decoding the frame and verifying must succeed (both ends write the same
    canonical form), and a changed body must not verify.
    """
    value = _unpack(data[2:])
    if not isinstance(value, dict):
        return
    digest = signing.body_digest(data[:2])
    code, opaque = _u8(data, 0), _u8(data, 1)
    try:
        text = signing.canonical(code, opaque, value, digest)
    except signing.SignatureError:  # a value nested deeper than MAX_VALUE_DEPTH
        return
    # Linear in the input (each level of nesting once, not re-quoted: see the regression test).
    assert len(text) <= 160 + 8 * len(data), len(text)  # (version, code, opaque, 64-byte digest, newlines)
    ext = {k: v for k, v in value.items() if k not in signing.SIGNING_FIELDS}
    cmd = Command(code, opaque, 0, None, ext, data[:2])
    creds = signing.Credentials("ak", "sk")
    signing.sign(cmd, creds, 1_000)
    try:
        wire = encode_bytes(cmd)
    except LocalProtocolError:
        return
    [got] = FrameDecoder().feed(wire)
    signing.verify(got, "sk", 1_000, 10)
    got.body = data[:2] + b"!"
    try:
        signing.verify(got, "sk", 1_000, 10)
    except signing.SignatureError:
        pass
    else:
        raise AssertionError("a changed body verified")


# --- the HA frame codec ----------------------------------------------------------------------------------

_DECODERS: dict[int, Callable[[memoryview], Any]] = {
    ha.HELLO: ha.decode_hello,
    ha.JOIN: ha.decode_join,
    ha.DATA: ha.decode_data,
    ha.ACK: ha.decode_ack,
    ha.AUTH: ha.decode_auth,
}


def _ha_frames(data: bytes, step: int) -> tuple[list[tuple[int, bytes]], int, type[BaseException] | None]:
    dec = ha.FrameDecoder(max_frame=1 << 16)
    frames: list[tuple[int, bytes]] = []
    try:
        for i in range(0, len(data), step):
            frames += [(kind, bytes(body)) for kind, body in dec.feed(data[i : i + step])]
    except ProtocolError as exc:
        return frames, -1, type(exc)
    return frames, dec.buffered, None


def ha_codec(data: bytes) -> None:
    """pymq.broker.ha.codec: the frame decoder (whole vs in pieces: the same frames) and each frame kind's decoder.

    Only ProtocolError may come out; what decodes re-encodes to the same bytes.
    """
    step = _u8(data, 0) % 13 + 1
    whole = _ha_frames(data, max(len(data), 1))
    pieces = _ha_frames(data, step)
    if whole[2] is None and whole != pieces:
        raise Divergence(f"HA decoder: whole {whole!r} != in pieces of {step} {pieces!r}")
    if whole[2] is not None:
        assert pieces[2] is not None
    frames = list(whole[0])
    # Each body also as every kind: the decoders must refuse what is not theirs.
    frames += [(kind, data[1:]) for kind in _DECODERS]
    for kind, body in frames:
        decode = _DECODERS.get(kind)
        if decode is None:
            continue
        try:
            msg = decode(memoryview(body))
        except ProtocolError:
            continue
        framed = struct.pack(">IB", 1 + len(body), kind) + body
        if kind == ha.HELLO:
            assert ha.encode_hello(msg) == framed or "\ufffd" in msg.address
        elif kind == ha.JOIN:
            assert ha.encode_join(msg) == framed or "\ufffd" in msg.reason
        elif kind == ha.ACK:
            assert ha.encode_ack(msg) == framed
        elif kind == ha.DATA:
            offset, master_max, flags, rest = msg
            assert ha.data_header(offset, master_max, len(rest), flags) + bytes(rest) == framed
        elif kind == ha.AUTH:
            assert ha.decode_auth(memoryview(ha.encode_auth(msg)[5:])) == msg


# --- timer files -----------------------------------------------------------------------------------------

_TMP = Path(tempfile.mkdtemp(prefix="pymq-fuzz-timer-"))
_LOG_FILE = UNIT_SIZE * 8


def timer_files(data: bytes) -> None:
    """The timer's files as a crash or a disk may leave them: the TimerLog's segments, the wheel, the checkpoint.

    The TimerLog reads, scans, follows chains and truncates any segment bytes without an
    error; the wheel reads any slot; the checkpoint's JSON loads or raises ValueError,
    TypeError, KeyError or AttributeError (what its callers at startup treat as unreadable).
    """
    logdir = _TMP / "log"
    if logdir.exists():
        for p in logdir.iterdir():
            p.unlink()
    logdir.mkdir(exist_ok=True)
    seg = data[: 2 * _LOG_FILE].ljust(2 * _LOG_FILE, b"\x00")
    (logdir / f"{0:020d}").write_bytes(seg[:_LOG_FILE])
    (logdir / f"{_LOG_FILE:020d}").write_bytes(seg[_LOG_FILE:])
    log = TimerLog(logdir, _LOG_FILE)
    log.load()
    try:
        units = list(log.scan(0))
        assert all(u.pos == i * UNIT_SIZE for i, u in enumerate(units))
        for u in units:
            chain = log.chain(u.pos, u.slot_ms)
            assert len(chain) <= len(units), "a chain longer than the log: it went round a loop"
        log.write_pos = len(units) * UNIT_SIZE
        log.truncate(_u8(data, 0) // 8 * UNIT_SIZE)
        assert list(log.scan(log.write_pos)) == []
    finally:
        log.close()

    wheel_path = _TMP / "wheel"
    wheel_path.write_bytes(data[: SLOT_SIZE * 4].ljust(SLOT_SIZE * 4, b"\x00"))
    wheel = TimerWheel(wheel_path, 4, 1000)
    try:
        for i in range(4):
            slot_ms = struct.unpack_from(">q", wheel.mm, i * SLOT_SIZE)[0]
            wheel.get(slot_ms)
            wheel.get(i * 1000)
    finally:
        wheel.close()

    try:
        json.loads(data)
    except ValueError:
        return
    ck_path = _TMP / "timerCheckpoint.json"
    ck_path.write_bytes(data)
    try:
        ck = TimerCheckpoint.load(ck_path)
    except (ValueError, TypeError, KeyError, AttributeError):
        return
    if ck is not None:  # (None: the file held JSON null)
        assert TimerCheckpoint.from_json(ck.to_json()) == ck


# --- pop records and receipt handles ---------------------------------------------------------------------

_SIGNER = HandleSigner(b"k" * 32)


def pop_records(data: bytes) -> None:
    """pymq.broker.pop: checkpoint and ack bodies (ValueError, KeyError or TypeError: what revive replay skips)
    and receipt handles (HandleError), signed ones included so the fuzzer gets past the MAC."""
    revive = "rmq_sys_REVIVE_LOG_c"
    try:
        ck = CheckPoint.from_body(data)
    except (ValueError, KeyError, TypeError):
        pass
    else:
        body = record.parse_record(ck.to_record(revive)).body
        assert CheckPoint.from_body(body) == ck
    try:
        acks = parse_ack(data)
    except (ValueError, KeyError, TypeError):
        pass
    else:
        for ck_offset, indexes in acks:
            assert isinstance(ck_offset, int) and all(isinstance(i, int) for i in indexes)

    text = data.decode("latin-1")
    try:
        _SIGNER.decode(text)
    except HandleError:
        pass
    # The same bytes as a payload signed with the broker's key: the parse after the MAC.
    signed = _SIGNER._mac(data) + data
    import base64

    handle_text = base64.urlsafe_b64encode(signed).rstrip(b"=").decode()
    try:
        h = _SIGNER.decode(handle_text)
    except HandleError:
        return
    assert isinstance(h, ReceiptHandle)
    if all(x >= 0 for x in (h.index, h.revive_qid)):
        assert _SIGNER.decode(_SIGNER.encode_v1(h)) == h
        if h.queue_offset >= 0:  # (version 2 writes index and queue offset as digits)
            assert _SIGNER.decode(_SIGNER.encode(h)) == h


# --- RocketMQ 4.x remoting (issue 30) ----------------------------------------------------------------


def _remoting_commands(data: bytes, cuts: list[int]) -> tuple[str, Any]:
    wire = RemotingWire(max_frame_size=1 << 16)
    cmds: list[Command] = []
    prev = 0
    error: type[BaseException] | None = None
    try:
        for cut in [*cuts, len(data)]:
            cmds += wire.feed(data[prev:cut])
            prev = cut
    except ProtocolError as exc:
        error = type(exc)
    out = [(c.code, c.opaque, c.flags, c.remark, c.ext, bytes(c.body)) for c in cmds]
    return ("error", (out, error)) if error is not None else ("ok", (out, wire.buffered))


def remoting(data: bytes) -> None:
    """pymq.remoting: the stream decoder (JSON and ROCKETMQ headers; whole vs in pieces: the same commands),
    each command re-encoded and decoded again (the same command), SEND_MESSAGE(_V2) header decoding,
    MessageDecoder bodies (decode_messages) and from_stored_records over the same bytes (C vs Python).

    Allowed: ProtocolError from the decoder, HeaderFieldError from the send header, RemoteProtocolError
    from decode_messages, MessageDecodeError/ValueError from from_stored_records.
    """
    whole = _remoting_commands(data, [])
    step = _u8(data, 0) % 13 + 1
    pieces = _remoting_commands(data, list(range(step, len(data), step)))
    if whole[0] == pieces[0] == "error":
        (w_out, w_err), (p_out, p_err) = whole[1], pieces[1]
        if w_err is not p_err or p_out[: len(w_out)] != w_out:
            raise Divergence(f"remoting decoder: whole {whole!r} != in pieces of {step} {pieces!r}")
    elif whole != pieces:
        raise Divergence(f"remoting decoder: whole {whole!r} != in pieces of {step} {pieces!r}")
    for code, opaque, flags, remark, ext, body in whole[1][0]:
        for stype in (SerializeType.JSON, SerializeType.ROCKETMQ):
            if stype is SerializeType.ROCKETMQ and not -(1 << 15) <= code < (1 << 15):
                continue
            rc = RemotingCommand(code, opaque=opaque, flag=flags, remark=remark, ext_fields=ext, body=body,
                                 serialize_type=stype)  # fmt: skip
            again = remoting_command.decode_frame(remoting_command.encode(rc))
            # an empty remark or ext reads back as None in the binary header (as RocketMQ's does)
            assert (again.code, again.opaque, again.flag, again.body) == (code, opaque, flags, body), again
            assert (again.remark or None, again.ext_fields or {}) == (remark or None, ext or {}), again
        rc = RemotingCommand(code, ext_fields=ext, body=body)
        try:
            send_header.decode_send_header(rc)
        except send_header.HeaderFieldError:
            pass
    try:
        message_layout.decode_messages(data)
    except RemoteProtocolError:
        pass
    # the C accelerator and its pure-Python twin: the same bytes or the same error type
    differential(message_layout.from_stored_records, data, allowed=(MessageDecodeError, ValueError))


# --- the RocketMQ 5.x gRPC front end's request mapping (issues 31, 35) -----------------------------------

#: (method, request class) in the order of an input's first byte (make_corpus.py writes seeds the same way)
GRPC_REQUESTS: list[tuple[str, Any]] = [
    ("SendMessage", spb.SendMessageRequest),
    ("ReceiveMessage", spb.ReceiveMessageRequest),
    ("AckMessage", spb.AckMessageRequest),
    ("ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest),
    ("EndTransaction", spb.EndTransactionRequest),
    ("QueryRoute", spb.QueryRouteRequest),
    ("QueryAssignment", spb.QueryAssignmentRequest),
    ("Heartbeat", spb.HeartbeatRequest),
    ("NotifyClientTermination", spb.NotifyClientTerminationRequest),
    ("ForwardMessageToDeadLetterQueue", spb.ForwardMessageToDeadLetterQueueRequest),
    ("Telemetry", spb.TelemetryCommand),
]
#: what handlers.py's request decoders turn a request that does not decode into (a BAD_REQUEST answer)
_GRPC_DECODERS = {cls: grpc_handlers._decoder(cls) for _, cls in GRPC_REQUESTS}
_GRPC_ROUTE = TopicRouteData(
    queueDatas=[QueueData("b", 2, 3, 6), QueueData("b2", 2, 1, 6), QueueData("gone", 1, 1, 6)],
    brokerDatas=[
        BrokerData("c", "b", {0: "127.0.0.1:1"}),
        BrokerData("c", "b2", {0: "127.0.0.1:3"}),
        BrokerData("c", "gone", {1: "127.0.0.1:2"}),
    ],
)
_GRPC_SETTINGS = SimpleNamespace(settings=ProxySettings())
_GRPC_TYPE_ATTRIBUTES = ({}, {"message.type": "NORMAL"}, {"message.type": "FIFO"}, {"message.type": "MIXED"})
_UNIQ = "0A0000010000000000000001"


_GRPC_MAX_BODY = 1024


def _grpc_status(exc: grpc_mapping.MappingError) -> None:
    """What the client is answered for a MappingError: the code it carries, never INTERNAL_SERVER_ERROR."""
    st = grpc_mapping.error_status(exc)
    assert st.code == exc.code and st.code != gpb.INTERNAL_SERVER_ERROR and st.message, st


def _grpc_handle(text: str) -> None:
    """A receipt handle (or transaction id) from a client: MappingError, or parts that wrap back to the same."""
    try:
        broker, handle, offset = grpc_mapping.unwrap_handle_offset(text)
    except grpc_mapping.MappingError as exc:
        assert exc.code == gpb.INVALID_RECEIPT_HANDLE
        _grpc_status(exc)
        return
    assert broker and handle and (offset is None or offset >= 0)
    assert grpc_mapping.unwrap_handle_offset(grpc_mapping.wrap_handle(broker, handle, offset)) == (
        broker,
        handle,
        offset,
    )


def _grpc_send(m: Any) -> None:
    """One SendMessage entry: to_pymq, the type checks, the half-message marking, and the record round trip
    (what a 5.x consumer reads back is what was sent: body, tag, keys, user properties)."""
    try:
        out = grpc_mapping.to_pymq(m, _GRPC_MAX_BODY)
    except grpc_mapping.MappingError as exc:
        _grpc_status(exc)
        return
    mtype = grpc_mapping.effective_type(out)
    for attributes in _GRPC_TYPE_ATTRIBUTES:
        for unset_is_normal in (False, True):
            accepted = grpc_mapping.message_types(attributes, unset_is_normal=unset_is_normal)
            try:
                grpc_mapping.check_type(out, accepted)
            except grpc_mapping.MappingError as exc:
                assert mtype not in accepted
                _grpc_status(exc)
    sp = m.system_properties
    if mtype == gpb.TRANSACTION:
        half = grpc_mapping.Outgoing(
            Message(out.message.topic, out.message.body, out.message.tags, out.message.keys,
                    properties=dict(out.message.properties)),
            out.message_id, out.message_group, out.message_type,
        )  # fmt: skip
        try:
            grpc_mapping.mark_transactional(half, sp, "PYMQ_GRPC_PROXY")
        except grpc_mapping.MappingError as exc:
            _grpc_status(exc)
        else:  # a half message reads back as a TRANSACTION message with the same user properties
            rec = record.encode_record(
                half.message.topic.encode(), bytes(half.message.body), ProducerEncoding._properties(half.message, _UNIQ)
            )
            back = grpc_mapping.to_v2(decode_message(rec), half.message.topic, None, 0)
            assert back.system_properties.message_type == gpb.TRANSACTION, back
            assert dict(back.user_properties) == dict(m.user_properties), back
    props = ProducerEncoding._properties(out.message, _UNIQ)  # what the front end's producer encodes: no refusal
    rec = record.encode_record(out.message.topic.encode(), bytes(out.message.body), props, born_timestamp=1)
    ext = decode_message(rec, broker_name="b")
    back = grpc_mapping.to_v2(ext, ext.topic, "h", 1000)
    assert back.body == m.body and back.topic.name == m.topic.name, back
    assert dict(back.user_properties) == dict(m.user_properties), (dict(back.user_properties), m.user_properties)
    bsp = back.system_properties
    assert (bsp.tag if bsp.HasField("tag") else None) == (sp.tag if sp.HasField("tag") else None), bsp
    assert list(bsp.keys) == " ".join(sp.keys).split(), (list(bsp.keys), list(sp.keys))  # RocketMQ's KEYS: spaces
    if out.message_group is not None:
        assert bsp.message_group == out.message_group and bsp.message_type == gpb.FIFO, bsp
    assert bsp.message_id == _UNIQ and bsp.receipt_handle == "h", bsp


def _grpc_settings(settings: Any) -> None:
    """Telemetry settings: what the front end makes of them (registration with the brokers, effective settings)."""
    auth.settings_needs(settings)
    agent = settings.user_agent if settings.HasField("user_agent") else None
    language = grpc_mapping.client_language("", agent)
    assert isinstance(language, str) and language
    version = grpc_mapping.client_version_code(agent.version if agent is not None else "")
    assert isinstance(version, int) and version >= 0
    subs = grpc_mapping.subscriptions(settings)
    for sub in subs:
        assert Subscription.from_dict(sub.to_dict()) == sub
    body = grpc_mapping.heartbeat_body(
        "client", settings.client_type, language=language, version=version,
        producer_topics=[t.name for t in settings.publishing.topics], group=settings.subscription.group.name,
        subs=subs,
    )  # fmt: skip
    encode_body(body)
    MessagingService.effective_settings(_GRPC_SETTINGS, settings)  # type: ignore[arg-type]


def grpc_mapping_target(data: bytes) -> None:
    """pymq.grpc_proxy: bytes -> the apache.rocketmq.v2 request the first byte names (protobuf's parser:
    DecodeError allowed, and handlers.py's decoder then answers BAD_REQUEST), then the pure functions the
    front end feeds it to: auth.needs/settings_needs, mapping.to_pymq/effective_type/check_type/
    mark_transactional (MappingError), the record round trip back through to_v2 (the same body, tag, keys,
    user properties), receipt handles and transaction ids (MappingError; what parses wraps back the same),
    route_queues/message_types, client_language/client_version_code/subscriptions/heartbeat_body and the
    effective Telemetry settings (no error allowed).
    """
    if not data:
        return
    method, cls = GRPC_REQUESTS[data[0] % len(GRPC_REQUESTS)]
    raw = data[1:]
    try:
        req = cls.FromString(raw)
    except DecodeError:
        assert isinstance(_GRPC_DECODERS[cls](raw), grpc_handlers.Malformed)
        return
    assert not isinstance(_GRPC_DECODERS[cls](raw), grpc_handlers.Malformed)
    if method != "Telemetry":
        auth.needs(method, req)
    if method == "SendMessage":
        for m in req.messages:
            _grpc_send(m)
    elif method == "ReceiveMessage":
        grpc_mapping.millis(req.invisible_duration)
        grpc_mapping.millis(req.long_polling_timeout)
        Subscription.parse(req.message_queue.topic.name, req.filter_expression.expression or "*")
    elif method == "AckMessage":
        for e in req.entries:
            _grpc_handle(e.receipt_handle)
    elif method in ("ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"):
        if method == "ChangeInvisibleDuration":
            grpc_mapping.millis(req.invisible_duration)
        _grpc_handle(req.receipt_handle)
    elif method == "EndTransaction":
        try:
            parsed = grpc_mapping.parse_transaction_id(req.transaction_id)
        except grpc_mapping.MappingError as exc:
            assert exc.code == gpb.INVALID_TRANSACTION_ID
        else:
            assert grpc_mapping.parse_transaction_id(grpc_mapping.transaction_id(*parsed)) == parsed
    elif method in ("QueryRoute", "QueryAssignment"):
        types = grpc_mapping.message_types({"message.type": req.topic.name}, unset_is_normal=bool(data[0] & 0x80))
        queues = grpc_mapping.route_queues(req.topic, _GRPC_ROUTE, req.endpoints, types)
        assert [q.broker.name for q in queues] == ["b"] * 3 + ["b2"] * 2, queues  # "gone" has no master
    elif method == "Heartbeat":
        grpc_mapping.heartbeat_body("client", req.client_type, language="PYTHON", group=req.group.name)
    elif method == "Telemetry" and req.HasField("settings"):
        _grpc_settings(req.settings)


#: name -> target (the names are the corpus directories under fuzz/corpus/)
TARGETS: dict[str, Callable[[bytes], None]] = {
    "frame": frame,
    "records": records,
    "batch": batch,
    "headers": headers,
    "signing": signing_target,
    "ha_codec": ha_codec,
    "timer_files": timer_files,
    "pop_records": pop_records,
    "remoting": remoting,
    "grpc_mapping": grpc_mapping_target,
}

if os.environ.get("PYMQ_FUZZ_SELFTEST"):

    def _selftest(data: bytes) -> None:
        """A target that fails on the first input: the harness must report it (tests/fuzz)."""
        raise RuntimeError("selftest finding")

    TARGETS["selftest"] = _selftest

CORPUS = Path(__file__).resolve().parent / "corpus"

__all__ = ["ACCEL", "CORPUS", "TARGETS", "Divergence"]
