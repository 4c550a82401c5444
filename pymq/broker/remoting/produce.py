"""Translators of what a 4.x producer sends: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320),
END_TRANSACTION (37), CONSUMER_SEND_MSG_BACK (36), QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33); and the
CHECK_TRANSACTION_STATE (39) push.

Each send becomes the native SEND_MESSAGE / SEND_BATCH_MESSAGE with pymq records built from the
remoting header and body (:mod:`pymq.remoting.produce_map`), so the put path, its hooks (delay,
transactions, timers, priority), auto-creation of topics and the role gates are the native
ones. END_TRANSACTION, CONSUMER_SEND_MSG_BACK, QUERY_MESSAGE and VIEW_MESSAGE_BY_ID carry the
same header names in both protocols; their answers get RocketMQ's codes, and the message
bodies RocketMQ's MessageDecoder layout.
"""

from __future__ import annotations

from pymq.broker.remoting.context import RemotingContext
from pymq.broker.remoting.gateway import PushMapper, RemotingChannel, ResponseMapper, Translated, Translator
from pymq.errors import PymqError
from pymq.protocol.codes import RequestCode as NativeCode
from pymq.protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, Command
from pymq.protocol.message import Prop
from pymq.protocol.record import pack_host
from pymq.protocol.transaction import TRAN_MSG
from pymq.remoting.codes import RequestCode, ResponseCode
from pymq.remoting.message_layout import decode_messages, from_stored_records
from pymq.remoting.produce_map import (
    STORED_CODES,
    BatchRefused,
    check_transaction_body,
    is_batch,
    map_code,
    records_of_send,
    send_response_ext,
    store_host_bytes,
)
from pymq.remoting.send_header import HeaderFieldError, decode_send_ext

_SYSTEM_ERROR = int(ResponseCode.SYSTEM_ERROR)


def _coded(resp: Command) -> Command:
    """The native answer with RocketMQ's code, no pymq ext (answers whose header a 4.x client does not read)."""
    code, remark = map_code(resp.code, resp.remark)
    return Command(code, resp.opaque, FLAG_RESPONSE, remark)


def _born_host(channel: RemotingChannel) -> bytes:
    """The client's address as a record's 8-byte host (packed once per connection)."""
    born: bytes | None = channel.attrs.get("remoting_born_host")
    if born is None:
        host, _, port = channel.remote_addr.rpartition(":")
        born = channel.attrs["remoting_born_host"] = pack_host(host, int(port) if port.isdigit() else 0)
    return born


_V2 = int(RequestCode.SEND_MESSAGE_V2)
_NATIVE_SEND, _NATIVE_BATCH = int(NativeCode.SEND_MESSAGE), int(NativeCode.SEND_BATCH_MESSAGE)


def _sender(ctx: RemotingContext) -> Translator:
    store_host = store_host_bytes(ctx.address)

    def answer_of(tx_id: str | None) -> ResponseMapper:
        # a prepared message's answer carries its transaction id (rare: a closure only then)
        def answer(resp: Command) -> Command:
            ext = resp.ext
            if resp.code in STORED_CODES and ext and "commitLogOffsets" in ext:
                return Command(
                    resp.code, resp.opaque, FLAG_RESPONSE, resp.remark, send_response_ext(ext, store_host, tx_id)
                )
            return _coded(resp)

        return answer

    plain_answer = answer_of(None)

    def send(cmd: Command, channel: RemotingChannel) -> Translated | Command:
        ext = cmd.ext
        code = cmd.code
        try:
            header = decode_send_ext(code, ext)
            batch = is_batch(code, ext, header)
            raw = ext.get("i" if code == _V2 else "properties")
            born = channel.attrs.get("remoting_born_host") or _born_host(channel)
            records = records_of_send(header, cmd.body_bytes(), born, batch=batch, raw_properties=raw)
        except HeaderFieldError as exc:
            return cmd.response(_SYSTEM_ERROR, exc.remark)
        except BatchRefused as exc:
            return cmd.response(int(ResponseCode.MESSAGE_ILLEGAL), str(exc))
        props = header.properties
        tran = props.get(TRAN_MSG) if not batch else None
        answer = answer_of(props.get(Prop.UNIQ_KEY)) if tran is not None and tran.lower() == "true" else plain_answer
        native_ext = {"topic": header.topic, "queueId": header.queue_id, "producerGroup": header.producer_group}
        return Translated(Command(_NATIVE_BATCH if batch else _NATIVE_SEND, 0, 0, None, native_ext, records), answer)

    return send


def _same_header(native_code: NativeCode, answer: ResponseMapper = _coded) -> Translator:
    """A request whose header names agree in both protocols: handed on as it is."""

    def translate(cmd: Command, channel: RemotingChannel) -> Translated:
        return Translated(Command(int(native_code), ext=dict(cmd.ext), body=cmd.body), answer)

    return translate


def _messages_answer(resp: Command) -> Command:
    """QUERY_MESSAGE / VIEW_MESSAGE_BY_ID: the records in MessageDecoder's layout."""
    if resp.code != ResponseCode.SUCCESS:
        return _coded(resp)
    try:
        body = from_stored_records(resp.body_bytes())
        msgs = decode_messages(body)
    except (PymqError, ValueError) as exc:
        return Command(_SYSTEM_ERROR, resp.opaque, FLAG_RESPONSE, f"stored message unreadable: {exc}")
    newest = max((m.store_timestamp for m in msgs), default=0)
    newest_phys = max((m.commit_log_offset for m in msgs), default=0)
    ext = {"indexLastUpdateTimestamp": str(newest), "indexLastUpdatePhyoffset": str(newest_phys)}
    return Command(int(ResponseCode.SUCCESS), resp.opaque, FLAG_RESPONSE, None, ext, body)


def _view_answer(resp: Command) -> Command:
    if resp.code != ResponseCode.SUCCESS:
        return _coded(resp)
    try:
        body = from_stored_records(resp.body_bytes())
    except (PymqError, ValueError) as exc:
        return Command(_SYSTEM_ERROR, resp.opaque, FLAG_RESPONSE, f"stored message unreadable: {exc}")
    return Command(int(ResponseCode.SUCCESS), resp.opaque, FLAG_RESPONSE, None, body=body)


def produce_translators(ctx: RemotingContext) -> dict[int, Translator]:
    send = _sender(ctx)
    return {
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
        RequestCode.END_TRANSACTION: _same_header(NativeCode.END_TRANSACTION),
        RequestCode.CONSUMER_SEND_MSG_BACK: _same_header(NativeCode.CONSUMER_SEND_MSG_BACK),
        RequestCode.QUERY_MESSAGE: _same_header(NativeCode.QUERY_MESSAGE, _messages_answer),
        RequestCode.VIEW_MESSAGE_BY_ID: _same_header(NativeCode.VIEW_MESSAGE_BY_ID, _view_answer),
    }


def _check_transaction(cmd: Command) -> Command | None:
    """CHECK_TRANSACTION_STATE: the same header names; the half message in MessageDecoder's layout."""
    try:
        body = check_transaction_body(cmd.body_bytes())
    except (PymqError, ValueError):
        return None  # an unreadable half message: the broker checks it again next round
    return Command(int(RequestCode.CHECK_TRANSACTION_STATE), cmd.opaque, FLAG_ONEWAY, None, dict(cmd.ext), body)


def produce_pushes(ctx: RemotingContext) -> dict[int, PushMapper]:
    return {NativeCode.CHECK_TRANSACTION_STATE: _check_transaction}
