"""Decode cost of one 1 KiB send, RocketMQ 4.x remoting vs pymq's frame (in process, no sockets).

    python benchmarks/remoting_codec_bench.py [--json]

* ``native_send_decode``: pymq frame -> Command -> SendMessageRequest (µs per send).
* ``remoting_send_decode``: the C++ client's SEND_MESSAGE JSON frame -> RemotingCommand ->
  SendMessageRequestHeader (µs per send).
* ``remoting_v2_send_decode``: the same as SEND_MESSAGE_V2 in a binary ROCKETMQ header.
* ``wire_send_decode`` / ``wire_v2_send_decode``: the broker's path for those two frames:
  ``RemotingWire.feed`` (frame -> fields -> Command, no RemotingCommand) -> ``decode_send_ext``.
* ``pull_layout_32x1k``: 32 x 1 KiB records into MessageDecoder layout (µs per pull body).

Only the codec part of a send: the broker's handler and put path are not wired for remoting
yet (issue 30), so this is no end-to-end ratio. Best of 5 rounds, process CPU time.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from pymq.protocol.codes import RequestCode as NativeCode
from pymq.protocol.frame import Command, FrameDecoder, encode_bytes
from pymq.protocol.requests import SendMessageRequest
from pymq.remoting.codes import LanguageCode, RequestCode, SerializeType
from pymq.remoting.command import RemotingCommand, RemotingDecoder, encode
from pymq.remoting.message_layout import MessageExt, encode_message, properties_string
from pymq.remoting.send_header import V2_NAMES, decode_send_ext, decode_send_header
from pymq.remoting.wire import RemotingWire

BODY = b"x" * 1024
PROPS = {"KEYS": "k1", "TAGS": "TagA", "UNIQ_KEY": "0100007F000057C60000055A66920100", "WAIT": "true"}
EXT = {
    "producerGroup": "PG",
    "topic": "TopicTest",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "1",
    "sysFlag": "0",
    "bornTimestamp": "1795857381253",
    "flag": "0",
    "properties": properties_string(PROPS),
    "reconsumeTimes": "0",
    "unitMode": "0",
    "batch": "0",
}


def best_us(fn: Callable[[], None], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t) / n * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    native = encode_bytes(
        Command(code=NativeCode.SEND_MESSAGE, opaque=1, ext={"topic": "TopicTest", "queue_id": 1}, body=BODY)
    )
    v1 = encode(
        RemotingCommand(code=RequestCode.SEND_MESSAGE, language=LanguageCode.CPP, opaque=1, ext_fields=EXT, body=BODY)
    )
    short = {v: k for k, v in V2_NAMES.items()}
    v2 = encode(
        RemotingCommand(
            code=RequestCode.SEND_MESSAGE_V2,
            opaque=1,
            ext_fields={short[k]: v for k, v in EXT.items()},
            body=BODY,
            serialize_type=SerializeType.ROCKETMQ,
        )
    )
    nd, rd = FrameDecoder(), RemotingDecoder()

    def native_once() -> None:
        (cmd,) = nd.feed(native)
        SendMessageRequest.from_ext(cmd.ext)

    def remoting_v1() -> None:
        (cmd,) = rd.feed(v1)
        decode_send_header(cmd)

    def remoting_v2() -> None:
        (cmd,) = rd.feed(v2)
        decode_send_header(cmd)

    wire = RemotingWire()

    def wire_v1() -> None:
        (cmd,) = wire.feed(v1)
        decode_send_ext(cmd.code, cmd.ext)

    def wire_v2() -> None:
        (cmd,) = wire.feed(v2)
        decode_send_ext(cmd.code, cmd.ext)

    msgs = [
        MessageExt(topic="TopicTest", body=BODY, queue_offset=i, commit_log_offset=i * 1200, properties=PROPS)
        for i in range(32)
    ]

    def pull_layout() -> None:
        b"".join(encode_message(m) for m in msgs)

    out = {
        "native_send_decode": best_us(native_once, 20000),
        "remoting_send_decode": best_us(remoting_v1, 20000),
        "remoting_v2_send_decode": best_us(remoting_v2, 20000),
        "wire_send_decode": best_us(wire_v1, 20000),
        "wire_v2_send_decode": best_us(wire_v2, 20000),
        "pull_layout_32x1k": best_us(pull_layout, 2000),
    }
    out["ratio_v2_vs_native"] = out["remoting_v2_send_decode"] / out["native_send_decode"]
    out["ratio_wire_v2_vs_native"] = out["wire_v2_send_decode"] / out["native_send_decode"]
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:28s} {v:8.2f}")


if __name__ == "__main__":
    main()
