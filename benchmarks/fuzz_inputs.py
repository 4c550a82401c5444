"""What benchmarks/fuzz_daemon.py throws at the daemons: one input at a time from a seeded generator.

Kinds: ``garbage`` (random bytes), ``bad_length`` (impossible frame lengths), ``bad_header``
(undecodable or ill-shaped headers), ``truncated`` (a frame cut short) end their connection;
``random_header`` (well-framed, random code, flags and fields), ``bad_body`` (known codes,
mutated records and bodies) and ``hostile`` (valid requests: far offsets, held pulls, stray
groups, fuzz topics) keep it open. With ACL credentials, well-framed inputs are signed or forged.

RocketMQ 4.x remoting frames share the daemons' ports (issue 30), chosen per connection by its
first bytes, so a connection speaks one format: ``remoting_request`` (well-framed JSON or
ROCKETMQ headers, random 4.x codes and string fields, random bodies) and ``remoting_hostile``
(valid 4.x requests: sends to fuzz topics, far pulls, heartbeats, offsets) keep a remoting
connection open; ``remoting_broken`` (malformed JSON, lengths past the frame, unknown
languages, truncated frames) ends it. With ACL they carry AclClientRPCHook signatures or forgeries.
"""

from __future__ import annotations

import json
import random
import struct
import time
from typing import Any

import msgpack

from pymq.protocol.codes import RequestCode
from pymq.protocol.frame import FrameDecoder, encode_bytes
from pymq.protocol.headers import encode_body
from pymq.protocol.record import encode_record
from pymq.remoting import codes as rcodes
from pymq.remoting.command import RemotingCommand, RemotingDecoder
from pymq.remoting.command import encode as remoting_encode
from pymq.security import remoting_signing
from pymq.security.signing import Credentials, sign

#: the well-behaved producer's topic and the names fuzzing must never touch destructively
GOOD_TOPIC = "FuzzGoodTopic"
#: requests that would legitimately break the good producer (delete its topic, re-register its
#: broker elsewhere, change broker config): fuzzed only with names of the fuzzer's own
DESTRUCTIVE = {
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.RESET_CONSUMER_OFFSET,
}
CODES = [int(c) for c in RequestCode if c not in DESTRUCTIVE]


FUZZ_TOPICS = [f"fuzz-{i}" for i in range(16)] + ["%RETRY%fuzz", "%DLQ%fuzz", "", "a" * 300, "bad topic/../x"]
REMOTING_KINDS = ("remoting_request", "remoting_hostile", "remoting_broken")
KINDS = ("garbage", "bad_length", "bad_header", "truncated", "random_header", "bad_body", "hostile", *REMOTING_KINDS)
#: 4.x request codes fuzzed (what a 4.x client sends; the daemons answer the others REQUEST_CODE_NOT_SUPPORTED)
REMOTING_CODES = [int(c) for c in rcodes.RequestCode]
REMOTING_FIELDS = ["topic", "queueId", "consumerGroup", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
                   "suspendTimeoutMillis", "subscription", "subVersion", "expressionType", "producerGroup",
                   "defaultTopic", "defaultTopicQueueNums", "bornTimestamp", "flag", "properties",
                   "reconsumeTimes", "unitMode", "batch", "maxReconsumeTimes", "a", "b", "c", "d", "e", "f",
                   "g", "h", "i", "j", "k", "l", "m", "n", "group", "offset", "delayLevel", "originMsgId",
                   "originTopic", "tranStateTableOffset", "commitLogOffset", "commitOrRollback",
                   "fromTransactionCheck", "msgId", "transactionId", "key", "maxNum", "beginTimestamp",
                   "endTimestamp", "timestamp", "clientID"]  # fmt: skip


def frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def header(code: int, ext: Any, *, opaque: int = 1, flags: int = 0, remark: Any = None) -> bytes:
    packed: bytes = msgpack.packb([code, opaque, flags, remark, ext], use_bin_type=True)
    return packed


class Inputs:
    """Generates one input (bytes to write) of a given kind from a seeded generator."""

    def __init__(self, rng: random.Random, creds: Credentials | None = None) -> None:
        self.rng = rng
        self.opaque = 0
        #: with ACL on: the fuzz account; well-framed inputs are then signed with it, or carry
        #: forged signing fields, or none
        self.creds = creds

    def make(self, kind: str) -> tuple[bytes, bool]:
        if kind in REMOTING_KINDS:
            return self._remoting(kind)
        data, last = self._make(kind)
        if self.creds is not None and kind in ("random_header", "bad_body", "hostile"):
            data = self._sign_or_forge(data)
        return data, last

    # --- RocketMQ 4.x remoting ------------------------------------------------------------------------

    def _remoting(self, kind: str) -> tuple[bytes, bool]:
        r = self.rng
        self.opaque += 1
        if kind == "remoting_broken":
            return self._remoting_broken(), True
        cmd = self._remoting_hostile() if kind == "remoting_hostile" else self._remoting_request()
        cmd.opaque = self.opaque
        cmd.serialize_type = r.choice([rcodes.SerializeType.JSON, rcodes.SerializeType.ROCKETMQ])
        if self.creds is not None:
            self._remoting_sign_or_forge(cmd)
        return remoting_encode(cmd), False

    def remoting_value(self) -> str:
        v = self.value(1)
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)

    def _remoting_request(self) -> RemotingCommand:
        r = self.rng
        code = r.choice(REMOTING_CODES) if r.random() < 0.85 else r.randrange(-(2**15), 2**15)
        ext = {r.choice(REMOTING_FIELDS): self.remoting_value()[:64] for _ in range(r.randrange(0, 10))}
        body = r.choice([b"", r.randbytes(r.randrange(0, 256)), self.record(), b'{"clientID":' + r.randbytes(8)])
        return RemotingCommand(
            code,
            language=r.choice(list(rcodes.LanguageCode)),
            version=r.randrange(-(2**15), 2**15),
            flag=r.choice([0, 0, 0, 2, r.randrange(256)]) & ~rcodes.FLAG_RESPONSE,
            remark=self.remoting_value()[:32] if r.random() < 0.1 else None,
            ext_fields=ext,
            body=body,
        )

    def _remoting_hostile(self) -> RemotingCommand:
        """Valid 4.x requests a hostile client may send (never touching the good topic but to read it)."""
        r = self.rng
        topic = r.choice(FUZZ_TOPICS[:16])
        group = f"fuzz-group-{r.randrange(50)}"
        choice = r.randrange(6)
        if choice == 0:  # SEND_MESSAGE_V2
            ext = {"a": "fuzz-pg", "b": topic, "c": "TBW102", "d": "4", "e": str(r.randrange(-1, 6)), "f": "0",
                   "g": str(1_700_000_000_000 + r.randrange(10**9)), "h": "0", "i": "TAGS\x01t\x02KEYS\x01k\x02",
                   "j": str(r.randrange(0, 20)), "k": "false", "m": r.choice(["false", "true"])}  # fmt: skip
            return RemotingCommand(310, ext_fields=ext, body=r.randbytes(r.randrange(0, 2048)))
        if choice == 1:  # PULL_MESSAGE, far or held
            ext = {"consumerGroup": group, "topic": r.choice([topic, GOOD_TOPIC]), "queueId": str(r.randrange(0, 8)),
                   "queueOffset": str(r.choice([0, 2**62, -5])), "maxMsgNums": str(r.choice([1, 32, 1024])),
                   "sysFlag": str(r.choice([0, 2, 3, 7])), "commitOffset": "-1",
                   "suspendTimeoutMillis": str(r.choice([0, 1000, 15000])), "subscription": r.choice(["*", "a||b"]),
                   "subVersion": "0", "expressionType": "TAG"}  # fmt: skip
            return RemotingCommand(11, ext_fields=ext)
        if choice == 2:  # HEART_BEAT with many groups
            groups = [{"groupName": f"fuzz-group-{r.randrange(50)}", "consumeType": "CONSUME_PASSIVELY",
                       "messageModel": r.choice(["CLUSTERING", "BROADCASTING", "x"]),
                       "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                       "subscriptionDataSet": [{"topic": topic, "subString": r.choice(["*", "a||b", "||"]),
                                                "subVersion": 1, "tagsSet": [], "codeSet": []}]}
                      for _ in range(r.randrange(1, 20))]  # fmt: skip
            body = json.dumps({"clientID": f"fuzz4@{r.randrange(100)}", "consumerDataSet": groups,
                               "producerDataSet": [{"groupName": "fuzz-pg"}]}).encode()  # fmt: skip
            return RemotingCommand(34, ext_fields={}, body=body)
        if choice == 3:  # offsets
            code = r.choice([14, 15, 29, 30, 31, 32])
            ext = {"consumerGroup": group, "topic": topic, "queueId": str(r.randrange(0, 8)),
                   "commitOffset": str(r.randrange(0, 2**40)), "timestamp": str(r.choice([0, 2**62]))}  # fmt: skip
            return RemotingCommand(code, ext_fields=ext)
        if choice == 4:  # lock / unlock
            body = json.dumps({"consumerGroup": group, "clientId": "fuzz4",
                               "mqSet": [{"topic": topic, "brokerName": "broker-a", "queueId": i}
                                         for i in range(r.randrange(0, 8))]}).encode()  # fmt: skip
            return RemotingCommand(r.choice([41, 42]), ext_fields={}, body=body)
        return RemotingCommand(r.choice([105, 106, 206, 38]), ext_fields={"topic": topic, "consumerGroup": group})

    def _remoting_broken(self) -> bytes:
        r = self.rng
        choice = r.randrange(6)
        if choice == 0:  # malformed JSON header
            hdr = r.choice([b"{not json", b'{"code":', b'{"code":"x"}', b"[1,2]", b'{"code":10,"extFields":[1]}',
                            b'{"code":10,"language":"KLINGON"}', b'{"code":1e999}'])  # fmt: skip
            return struct.pack(">iI", 4 + len(hdr), len(hdr)) + hdr
        if choice == 1:  # header length past the frame (JSON and ROCKETMQ types)
            st = r.choice([0, 1])
            return struct.pack(">iI", 4 + 2, (st << 24) | r.choice([3, 100, 2**24 - 1])) + b'{"'
        if choice == 2:  # binary header with lengths that run past it
            fixed = struct.pack(">hBhii", 10, 0, 1, 1, 0)
            hdr = fixed + struct.pack(">i", r.choice([-1, 2**31 - 1, 5])) + b"ab"
            return struct.pack(">iI", 4 + len(hdr), (1 << 24) | len(hdr)) + hdr
        if choice == 3:  # a negative or impossible length
            return struct.pack(">iI", r.choice([-1, 0, 3, 2**31 - 1]), (1 << 24) | 5) + r.randbytes(16)
        if choice == 4:  # an unknown language in a binary header
            fixed = struct.pack(">hBhii", 10, 200, 1, 1, 0) + struct.pack(">ii", 0, 0)
            return struct.pack(">iI", 4 + len(fixed), (1 << 24) | len(fixed)) + fixed
        full = remoting_encode(self._remoting_request())  # truncated
        return full[: r.randrange(1, len(full))]

    def _remoting_sign_or_forge(self, cmd: RemotingCommand) -> None:
        r = self.rng
        ext = dict(cmd.ext_fields or {})
        choice = r.random()
        if choice < 0.5:
            ext["AccessKey"] = self.creds.access_key  # type: ignore[union-attr]
            ext["Signature"] = remoting_signing.sign(ext, cmd.body, self.creds.secret_key)  # type: ignore[union-attr]
        elif choice < 0.8:
            ext["AccessKey"] = r.choice([self.creds.access_key, "nobody", "", "é"])  # type: ignore[union-attr]
            ext["Signature"] = r.choice(["AAAA", "é", "", "x" * 200])
        cmd.ext_fields = ext

    def _sign_or_forge(self, data: bytes) -> bytes:
        r = self.rng
        (cmd,) = FrameDecoder().feed(data)
        choice = r.random()
        if choice < 0.5:
            sign(cmd, self.creds, time.time_ns() // 1_000_000)  # type: ignore[arg-type]
        elif choice < 0.8:
            forged = {"AccessKey": r.choice([self.creds.access_key, "nobody", 5, None, "é"]),  # type: ignore[union-attr]
                      "Signature": r.choice(["AAAA", "é", 7, b"x", None]),
                      "Timestamp": r.choice([time.time_ns() // 1_000_000, 0, -1, 2**62, 1.5, "now", True]),
                      "Nonce": self.value(1)}  # fmt: skip
            cmd.ext.update(forged)
        return encode_bytes(cmd)

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        choice = r.randrange(12 if depth < 2 else 9)
        if choice == 0:
            return r.randrange(-(2**63), 2**63)
        if choice == 1:
            return r.choice([0, -1, 1, 2**31, 2**31 - 1, -(2**31), 2**63 - 1, 1024, 1025])
        if choice == 2:
            return r.choice([1.5, -0.0, 1e300, float("nan"), float("inf"), 2.0])
        if choice == 3:
            return "".join(r.choice("abc%/\x00é 9-_") for _ in range(r.randrange(0, 40)))
        if choice == 4:
            return r.choice(FUZZ_TOPICS)
        if choice == 5:
            return r.randbytes(r.randrange(0, 64))
        if choice == 6:
            return r.choice([None, True, False])
        if choice == 7:
            return str(r.randrange(-(10**20), 10**20))
        if choice == 8:
            return ""
        if choice == 9:
            return [self.value(depth + 1) for _ in range(r.randrange(0, 5))]
        return {str(self.value(depth + 1))[:20]: self.value(depth + 1) for _ in range(r.randrange(0, 5))}

    def ext(self) -> dict[str, Any]:
        r = self.rng
        names = ["topic", "queueId", "consumerGroup", "queueOffset", "maxMsgNums", "maxBytes", "sysFlag",
                 "commitOffset", "suspendTimeoutMillis", "subscription", "group", "offset", "key", "maxNum",
                 "brokerName", "brokerAddr", "clusterName", "brokerId", "timestamp", "readQueueNums",
                 "writeQueueNums", "perm", "producerGroup", "clientID", "delayLevel", "originTopic"]  # fmt: skip
        return {
            r.choice(names) if r.random() < 0.8 else str(self.value(1))[:16]: self.value()
            for _ in range(r.randrange(0, 8))
        }

    def record(self) -> bytes:
        r = self.rng
        rec = encode_record(r.choice(FUZZ_TOPICS).encode(), r.randbytes(r.randrange(0, 256)), b"")
        if r.random() < 0.7:  # mutate a few bytes
            b = bytearray(rec)
            for _ in range(r.randrange(1, 6)):
                b[r.randrange(len(b))] = r.randrange(256)
            rec = bytes(b[: r.randrange(1, len(b) + 1)] if r.random() < 0.3 else b)
        return rec

    def _make(self, kind: str) -> tuple[bytes, bool]:
        """(bytes, whether the connection should end right after them)."""
        r = self.rng
        self.opaque += 1
        if kind == "garbage":
            return r.randbytes(r.randrange(1, 2048)), True
        if kind == "bad_length":
            n = r.choice([0, 1, 3, 2**31, 2**32 - 1, 17 * 1024 * 1024 + 8])
            # a header longer than the frame: n + 100 does not fit a u32 when n is near 2^32
            hl = r.choice([0, 2**31, min(n + 100, 2**32 - 1), 5])
            return struct.pack(">II", n, hl) + r.randbytes(r.randrange(0, 64)), True
        if kind == "bad_header":
            raw = r.choice(
                [
                    r.randbytes(r.randrange(1, 64)),
                    msgpack.packb({"code": 10}),
                    msgpack.packb([10, 1]),
                    msgpack.packb([10, 1, 0, None, "not a map"]),
                    msgpack.packb(["10", "1", "0", 5, {}]),
                    msgpack.packb([10, 1, 0, None, {1: 2, "x": {"y": [1]}}]),
                    msgpack.packb([2**63 - 1, -1, 255, "r", {}]),
                ]
            )
            return frame(raw, r.randbytes(r.randrange(0, 32))), r.random() < 0.5
        if kind == "truncated":
            full = frame(header(r.choice(CODES), self.ext(), opaque=self.opaque), r.randbytes(r.randrange(0, 512)))
            return full[: r.randrange(1, len(full))], True
        if kind == "random_header":
            code = r.choice(CODES) if r.random() < 0.85 else r.randrange(-(2**31), 2**31)
            flags = r.choice([0, 0, 0, 1, 2, 3, r.randrange(256)])
            return frame(
                header(
                    code,
                    self.ext(),
                    opaque=self.opaque,
                    flags=flags,
                    remark=str(self.value(1))[:64] if r.random() < 0.2 else None,
                ),
                r.randbytes(r.randrange(0, 128)),
            ), False
        if kind == "bad_body":
            code = r.choice(
                [RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE, RequestCode.HEART_BEAT,
                 RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
                 RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                 RequestCode.CONSUMER_SEND_MSG_BACK]
            )  # fmt: skip
            ext = {"topic": r.choice(FUZZ_TOPICS), "queueId": r.randrange(-2, 10), "group": "fuzz"}
            body = r.choice(
                [
                    self.record(),
                    self.record() + self.record(),
                    encode_body(self.value()),
                    encode_body({"clientID": self.value(), "consumerDataSet": [self.value() for _ in range(3)]}),
                    encode_body({"consumerGroup": "fuzz", "clientId": "x", "mqSet": self.value()}),
                    r.randbytes(r.randrange(0, 1024)),
                ]
            )
            return frame(header(int(code), ext, opaque=self.opaque), body), False
        return self.hostile(), False

    def hostile(self) -> bytes:
        """Valid requests a hostile client may send: far offsets, held pulls, stray groups, fuzz topics."""
        r = self.rng
        topic = r.choice([*FUZZ_TOPICS[:16], GOOD_TOPIC])
        group = f"fuzz-group-{r.randrange(50)}"
        choice = r.randrange(9)
        if choice == 0:
            ext = {"consumerGroup": group, "topic": topic, "queueId": r.randrange(0, 8),
                   "queueOffset": r.choice([0, 2**62, -5]), "maxMsgNums": r.choice([1, 1024]),
                   "sysFlag": r.choice([0, 2, 3, 7]), "commitOffset": -1,
                   "suspendTimeoutMillis": r.choice([0, 1000, 15000])}  # fmt: skip
            return frame(header(RequestCode.PULL_MESSAGE, ext, opaque=self.opaque))
        if choice == 1 and topic != GOOD_TOPIC:
            body = encode_record(topic.encode(), r.randbytes(r.randrange(0, 2048)), b"")
            ext = {"topic": topic, "queueId": r.randrange(-1, 4), "producerGroup": "fuzz"}
            return frame(header(RequestCode.SEND_MESSAGE, ext, opaque=self.opaque), body)
        if choice == 2:
            ext = {
                "consumerGroup": group,
                "topic": topic,
                "queueId": r.randrange(0, 8),
                "commitOffset": r.randrange(0, 2**40),
            }
            return frame(header(RequestCode.UPDATE_CONSUMER_OFFSET, ext, opaque=self.opaque))
        if choice == 3:
            groups = [{"groupName": f"fuzz-group-{r.randrange(50)}", "consumeType": "CONSUME_ACTIVELY",
                       "messageModel": r.choice(["CLUSTERING", "BROADCASTING", "x"]),
                       "subscriptionDataSet": [
                           {"topic": r.choice(FUZZ_TOPICS), "subString": r.choice(["*", "a||b", "||"])}
                       ]}
                      for _ in range(r.randrange(1, 20))]  # fmt: skip
            body = encode_body(
                {"clientID": f"fuzz@{r.randrange(100)}", "consumerDataSet": groups, "producerDataSet": []}
            )
            return frame(header(RequestCode.HEART_BEAT, {}, opaque=self.opaque), body)
        if choice == 4:
            name = r.choice(FUZZ_TOPICS[:16])
            ext = {"topic": name, "readQueueNums": r.randrange(1, 9), "writeQueueNums": r.randrange(1, 9), "perm": 6}
            return frame(header(RequestCode.UPDATE_AND_CREATE_TOPIC, ext, opaque=self.opaque))
        if choice == 5:
            ext = {
                "topic": topic,
                "key": self.value(1),
                "maxNum": r.choice([1, 64, 2**31]),
                "beginTimestamp": 0,
                "endTimestamp": 2**62,
            }
            return frame(header(RequestCode.QUERY_MESSAGE, ext, opaque=self.opaque))
        if choice == 6:
            return frame(
                header(
                    RequestCode.VIEW_MESSAGE_BY_ID,
                    {"offset": r.choice([0, 2**40, -1, r.randrange(0, 10**6)])},
                    opaque=self.opaque,
                )
            )
        if choice == 7:
            return frame(header(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, opaque=self.opaque))
        return frame(
            header(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}, opaque=self.opaque)
        )


#: kinds that keep the connection usable (sent pipelined, many per connection), and the ones that end it
STREAM_KINDS = (["random_header", "bad_body", "hostile"], [3.0, 2.0, 2.0])
ENDING_KINDS = (["garbage", "bad_length", "bad_header", "truncated"], [1.0, 1.0, 1.0, 1.0])
#: the same for a connection that speaks RocketMQ remoting (its first bytes decide, for the whole connection)
REMOTING_STREAM_KINDS = (["remoting_request", "remoting_hostile"], [3.0, 2.0])
REMOTING_ENDING_KINDS = (["remoting_broken"], [1.0])


def answer_decoder(remoting: bool) -> FrameDecoder | RemotingDecoder:
    """What reads the daemon's answers on a connection of that format."""
    return RemotingDecoder() if remoting else FrameDecoder()
