"""Write the seed corpus (fuzz/corpus/<target>/seed-*) from pymq's real encoders.

    python fuzz/make_corpus.py

Deterministic: rerunning it rewrites the same files. Each seed is an input its target
decodes fully (a well-formed frame, record, batch, header, handle…), so the fuzzer starts
from the inside of each format rather than from its first length check.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import msgpack

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from targets import _SIGNER, HEADERS, _u8  # noqa: E402

from pymq.broker.ha import codec as ha  # noqa: E402
from pymq.broker.ha.epoch_file import EpochEntry  # noqa: E402
from pymq.broker.pop.receipt import ReceiptHandle  # noqa: E402
from pymq.broker.pop.records import CheckPoint, ack_record  # noqa: E402
from pymq.broker.timer.checkpoint import TimerCheckpoint  # noqa: E402
from pymq.broker.timer.timer_log import MAGIC as TIMER_MAGIC  # noqa: E402
from pymq.broker.timer.timer_log import UNIT  # noqa: E402
from pymq.broker.timer.timer_wheel import SLOT  # noqa: E402
from pymq.protocol import record  # noqa: E402
from pymq.protocol.frame import Command, encode_bytes  # noqa: E402
from pymq.protocol.record import encode_properties, encode_record, pack_host  # noqa: E402

HOST = pack_host("10.0.0.1", 10911)


def _record(topic: bytes, body: bytes, props: dict[str, str], phys: int = 0) -> bytes:
    return encode_record(
        topic,
        body,
        encode_properties(props),
        born_timestamp=1_700_000_000_000,
        born_host=HOST,
        queue_id=1,
        queue_offset=7,
        physical_offset=phys,
        store_timestamp=1_700_000_000_001 if phys or props else 0,
        store_host=HOST,
    )


def seeds() -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    send = Command(10, 1, 0, None, {"topic": "T", "queueId": 0, "bornTimestamp": 1}, b"hello")
    out["frame"] = [
        encode_bytes(send),
        encode_bytes(Command(11, 2, 1, "ok", {}, b"")),
        encode_bytes(send) + encode_bytes(Command(12, 3, 2, None, {"a": [1, "b", None]}, b"x" * 40)),
    ]
    r1 = _record(b"T", b"body one", {"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "U1"})
    r2 = _record(b"T", b"", {})
    stored = _record(b"T", b"stored", {"TAGS": "t"}, phys=0)
    stored2 = _record(b"T", b"second", {"TAGS": "t"}, phys=len(stored))
    out["records"] = [r1, r1 + r2, stored + stored2 + record.blank_marker(64), r1[:60]]
    # batch: byte 0 picks the topic length (then that many topic bytes), byte 1 the max size; the rest is the batch
    t = b"T"
    head = bytes([len(t), 200]) + t
    out["batch"] = [
        head + r1 + r2,
        head + r1 + _record(b"X", b"other topic", {}),
        head + _record(b"T", b"y" * 300, {"UNIQ_KEY": "U2", "TAGS": "z"}),
    ]
    hs = []
    for i, cls in enumerate(HEADERS):
        values = {}
        for f, wire in cls.WIRE.items():
            values[wire] = "1" if "name" not in f and "topic" not in f and "group" not in f else "G"
        hs.append(bytes([i]) + msgpack.packb(values))
        hs.append(bytes([i]) + msgpack.packb(list(values.values())))
    out["headers"] = hs
    out["signing"] = [
        b"\x0a\x01" + msgpack.packb({"topic": "T", "queueId": 3, "tags": ["a", "b"], "m": {"k": b"v"}}),
        b"\x0b\x02" + msgpack.packb({"x": None, "y": True, "z": 1.5, "n": -(2**40)}),
    ]
    epochs = [EpochEntry(1, 0, 1), EpochEntry(2, 4096, 1)]
    out["ha_codec"] = [
        b"\x05" + ha.encode_hello(ha.Hello(4096, 1, epochs, "10.0.0.2:10912", 128, 99)),
        b"\x03" + ha.encode_join(ha.Join("truncate", 2048, 1 << 20, epochs, "behind")),
        b"\x01" + ha.data_header(0, 100, 4, ha.ACK_NOW) + b"abcd" + ha.encode_ack(4),
        b"\x07" + ha.encode_auth({"AccessKey": "ak", "Timestamp": 5, "Signature": "s"}),
    ]
    units = b"".join(
        UNIT.pack(-1 if i == 0 else (i - 1) * 40, 1000, 1000 + i, 4096 * i, 200, TIMER_MAGIC) for i in range(4)
    )
    wheel = SLOT.pack(1000, 0, 120, 4, 0) + SLOT.pack(-1, -1, -1, 0, 0)
    ck = TimerCheckpoint({0: 5}, 160, 1000, {0: 1000}, {"T\u0001k": [1, 2, 3, 1]}, {"T": 4})
    out["timer_files"] = [units, wheel, json.dumps(ck.to_json()).encode()]
    cp = CheckPoint("G", "T", 1, [5, 6, 9], 10, 1_700_000_000_000, 30_000)
    handle = ReceiptHandle("G", "T", 1, 5, 4096, 0, 1_700_000_000_000, 30_000, 2)
    signed = _SIGNER.encode(handle).encode()
    import base64

    raw = base64.urlsafe_b64decode(signed + b"=" * (-len(signed) % 4))
    out["pop_records"] = [
        bytes(record.parse_record(cp.to_record("R")).body),
        bytes(record.parse_record(ack_record("R", 4096, [0, 2], 5)).body),
        signed,
        raw[16:],  # the handle's payload (the target signs it with the fuzz key)
    ]
    from pymq.remoting.codes import SerializeType
    from pymq.remoting.command import RemotingCommand
    from pymq.remoting.command import encode as remoting_encode
    from pymq.remoting.message_layout import MessageExt, encode_message

    v2 = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000000", "h": "0",
          "i": "TAGS\u0001a\u0002KEYS\u0001k\u0002", "j": "0", "k": "false", "m": "false"}  # fmt: skip
    out["remoting"] = [
        remoting_encode(RemotingCommand(310, opaque=1, ext_fields=v2, body=b"hello")),
        remoting_encode(
            RemotingCommand(310, opaque=2, ext_fields=v2, body=b"hi", serialize_type=SerializeType.ROCKETMQ)
        ),
        remoting_encode(RemotingCommand(105, opaque=3, ext_fields={"topic": "T"}))
        + remoting_encode(RemotingCommand(34, opaque=4, flag=2, remark="r", body=b'{"clientID":"c"}')),
        encode_message(MessageExt("T", b"body", queue_id=1, queue_offset=5, properties={"TAGS": "a"})),
        stored + stored2,
    ]
    out["grpc_mapping"] = grpc_seeds(signed.decode())
    assert _u8(b"", 0) == 0
    return out


def grpc_seeds(broker_handle: str) -> list[bytes]:
    """apache.rocketmq.v2 requests as the 5.x Python client 5.1.2 fills them (its fields, a producer's and a
    consumer's settings), with the receipt handles and transaction ids pymq's front end hands out; each
    prefixed with its index in targets.GRPC_REQUESTS."""
    from google.protobuf.duration_pb2 import Duration
    from google.protobuf.timestamp_pb2 import Timestamp
    from targets import GRPC_REQUESTS

    from pymq.grpc_proxy import mapping
    from pymq.grpc_proxy.pb import definition_pb2 as pb
    from pymq.grpc_proxy.pb import service_pb2 as spb

    index = {cls: i for i, (_, cls) in enumerate(GRPC_REQUESTS)}
    topic, group = pb.Resource(name="t5"), pb.Resource(name="g5")
    endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=8081)])
    born = Timestamp(seconds=1_700_000_000, nanos=5_000_000)

    def message(**sp: object) -> pb.Message:
        props = pb.SystemProperties(
            message_id="01A1B2C3D4E5F60718293A4B5C00000001", body_encoding=pb.IDENTITY, born_timestamp=born,
            born_host="host-1", **sp,  # type: ignore[arg-type]
        )  # fmt: skip
        return pb.Message(topic=topic, user_properties={"color": "red", "with space": "a b"}, system_properties=props,
                          body=b"\x00\x01binary\xff")  # fmt: skip

    handle = mapping.wrap_handle("broker-a", broker_handle, 4096)
    tx_id = mapping.transaction_id("broker-a", 7, 4096, "01A1B2C3D4E5F60718293A4B5C00000001")
    agent = pb.UA(language=pb.PYTHON, version="5.1.2", platform="Linux", hostname="host-1")
    consumer = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER, access_point=endpoints, request_timeout=Duration(seconds=3),
        subscription=pb.Subscription(
            group=group,
            subscriptions=[pb.SubscriptionEntry(topic=topic, expression=pb.FilterExpression(type=pb.TAG,
                                                                                           expression="A || B"))],
        ),
        user_agent=agent,
    )  # fmt: skip
    producer = pb.Settings(
        client_type=pb.PRODUCER, access_point=endpoints, request_timeout=Duration(seconds=3),
        publishing=pb.Publishing(topics=[topic], validate_message_type=True), user_agent=agent,
    )  # fmt: skip
    requests = [
        spb.SendMessageRequest(messages=[message(tag="T", keys=["k1", "k2"], message_type=pb.NORMAL)]),
        spb.SendMessageRequest(messages=[message(message_group="fifo-1", message_type=pb.FIFO)]),
        spb.SendMessageRequest(messages=[message(delivery_timestamp=born, message_type=pb.DELAY)]),
        spb.SendMessageRequest(messages=[message(delivery_timestamp=born, message_group="g", message_type=pb.FIFO)]),
        spb.SendMessageRequest(messages=[pb.Message(topic=topic, body=bytes(range(256)) * 5)]),  # over the limit
        spb.SendMessageRequest(
            messages=[
                message(
                    tag="T", message_type=pb.TRANSACTION, orphaned_transaction_recovery_duration=Duration(seconds=5)
                )
            ]
        ),
        spb.ReceiveMessageRequest(
            group=group,
            message_queue=pb.MessageQueue(
                topic=topic,
                id=0,
                permission=pb.READ_WRITE,
                broker=pb.Broker(name="broker-a", id=0, endpoints=endpoints),
            ),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="A || B"),
            batch_size=32,
            invisible_duration=Duration(seconds=15),
            auto_renew=False,
            long_polling_timeout=Duration(seconds=2),
        ),
        spb.AckMessageRequest(
            group=group,
            topic=topic,
            entries=[spb.AckMessageEntry(message_id="01A1B2C3D4E5F60718293A4B5C00000001", receipt_handle=handle)],
        ),
        spb.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=handle, invisible_duration=Duration(seconds=30), message_id="01A1"
        ),
        spb.EndTransactionRequest(
            topic=topic,
            message_id="01A1B2C3D4E5F60718293A4B5C00000001",
            transaction_id=tx_id,
            resolution=pb.COMMIT,
            source=pb.SOURCE_CLIENT,
        ),
        spb.QueryRouteRequest(topic=topic, endpoints=endpoints),
        spb.QueryAssignmentRequest(topic=topic, group=group, endpoints=endpoints),
        spb.HeartbeatRequest(group=group, client_type=pb.SIMPLE_CONSUMER),
        spb.NotifyClientTerminationRequest(group=group),
        spb.ForwardMessageToDeadLetterQueueRequest(
            group=group,
            topic=topic,
            receipt_handle=handle,
            message_id="01A1",
            delivery_attempt=17,
            max_delivery_attempts=16,
        ),
        spb.TelemetryCommand(settings=consumer),
        spb.TelemetryCommand(settings=producer),
    ]
    return [bytes([index[type(r)]]) + r.SerializeToString() for r in requests]


def main() -> None:
    for name, items in seeds().items():
        d = HERE / "corpus" / name
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("seed-*"):
            old.unlink()
        for data in items:
            (d / f"seed-{hashlib.sha1(data).hexdigest()[:12]}").write_bytes(data)
        print(f"{name}: {len(items)} seeds")


if __name__ == "__main__":
    main()
