"""Send messages with the RocketMQ C++ client (librocketmq's C API through the wheel's ctypes binding).

Usage: produce_send.py NAMESRV MODE SPEC_JSON

MODE: sync, async, oneway, orderly (SendMessageOrderly with a queue selector: queue = arg % size),
sharding (SendMessageOrderlyByShardingKey), batch (SendBatchMessage: one batch of all the messages).
SPEC_JSON: {"group": ..., "messages": [{"topic", "body_hex", "tags", "keys", "props": {}, "delay": 0,
"arg": 0}]}. Prints one JSON line: {"results": [...]} with status/msg_id/offset (or error) per send.
"""

import ctypes
import json
import sys
import threading

from rocketmq.client import Message, Producer
from rocketmq.ffi import _CMQException, _CSendResult, dll

namesrv, mode, spec_json = sys.argv[1:]
spec = json.loads(spec_json)
producer = Producer(spec.get("group", "PG_PYMQ_PRODUCE"), orderly=mode == "sharding", timeout=5000)
producer.set_namesrv_addr(namesrv)
if spec.get("credentials"):  # AclClientRPCHook signatures (the C++ client signs with channel ALIYUN)
    producer.set_session_credentials(spec["credentials"]["access_key"], spec["credentials"]["secret_key"], "ALIYUN")
producer.start()


def build(m):
    msg = Message(m["topic"])
    body = bytes.fromhex(m["body_hex"])
    dll.SetByteMessageBody(msg._handle, body, len(body))
    if m.get("tags"):
        msg.set_tags(m["tags"])
    if m.get("keys"):
        msg.set_keys(m["keys"])
    for k, v in m.get("props", {}).items():
        msg.set_property(k, v)
    if m.get("delay"):
        msg.set_delay_time_level(m["delay"])
    return msg


def ok(res):
    return {"status": int(res.sendStatus), "msg_id": res.msgId.decode(), "offset": int(res.offset)}


results = []
SUCCESS_CB = ctypes.CFUNCTYPE(None, _CSendResult)
EXCEPTION_CB = ctypes.CFUNCTYPE(None, _CMQException)
SELECTOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
dll.SendMessageAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, SUCCESS_CB, EXCEPTION_CB]
dll.SendMessageOrderly.argtypes = [
    ctypes.c_void_p, ctypes.c_void_p, SELECTOR, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_CSendResult),
]  # fmt: skip


@SELECTOR
def select(size, _msg, arg):
    return (arg or 0) % size


try:
    if mode == "batch":
        batch = dll.CreateBatchMessage()
        for m in spec["messages"]:
            dll.AddMessage(batch, build(m)._handle)
        res = _CSendResult()
        rc = dll.SendBatchMessage(producer._handle, batch, ctypes.pointer(res))
        results.append(ok(res) if rc == 0 else {"error": f"rc {rc}: {dll.GetLatestErrorMessage()}"})
    for m in spec["messages"] if mode != "batch" else []:
        msg = build(m)
        try:
            if mode == "sync":
                results.append(producer.send_sync(msg)._asdict())
            elif mode == "oneway":
                producer.send_oneway(msg)
                results.append({"oneway": True})
            elif mode == "sharding":
                results.append(producer.send_orderly_with_sharding_key(msg, m.get("sharding", "k"))._asdict())
            elif mode == "orderly":
                res = _CSendResult()
                rc = dll.SendMessageOrderly(
                    producer._handle, msg._handle, select, m.get("arg", 0), 1, ctypes.pointer(res)
                )
                results.append(ok(res) if rc == 0 else {"error": f"rc {rc}: {dll.GetLatestErrorMessage()}"})
            elif mode == "async":
                done = threading.Event()
                box = {}

                def on_ok(res, box=box, done=done):
                    box.update(ok(res))
                    done.set()

                def on_err(exc, box=box, done=done):
                    box["error"] = f"{exc.error}: {exc.msg.decode(errors='replace')}"
                    done.set()

                cbs = (SUCCESS_CB(on_ok), EXCEPTION_CB(on_err))
                rc = dll.SendMessageAsync(producer._handle, msg._handle, *cbs)
                if rc != 0:
                    box["error"] = f"rc {rc}: {dll.GetLatestErrorMessage()}"
                elif not done.wait(15):
                    box["error"] = "no async callback within 15 s"
                results.append(box)
            else:
                raise SystemExit(f"unknown mode {mode}")
        except Exception as e:  # the client's own error, reported to the test
            results.append({"error": f"{type(e).__name__}: {e}"})
    for r in results:
        if "status" in r:
            r["status"] = int(r["status"])
    print(json.dumps({"results": results}))
finally:
    producer.shutdown()
