"""Read a topic with the RocketMQ C++ client's pull consumer (its C API through ctypes; the Python
wrapper 0.5.0rc2 does not wrap it). Prints one JSON object.

Usage: consume_pull.py NAMESRV GROUP TOPIC EXPRESSION

For every queue the client's FetchSubscriptionMessageQueues returns: Pull from offset 0 until the
answer is not FOUND (recording each status), then one Pull far past the end.
"""

import json
import sys
from ctypes import POINTER, Structure, byref, c_char_p, c_int, c_longlong, c_void_p

from rocketmq.ffi import _CMessageQueue, dll

namesrv, group, topic, expression = sys.argv[1:]
STATUS = ["FOUND", "NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_ILLEGAL", "BROKER_TIMEOUT"]


class CPullResult(Structure):
    _fields_ = [
        ("pullStatus", c_int),
        ("nextBeginOffset", c_longlong),
        ("minOffset", c_longlong),
        ("maxOffset", c_longlong),
        ("msgFoundList", POINTER(c_void_p)),
        ("size", c_int),
        ("pData", c_void_p),
    ]


dll.CreatePullConsumer.argtypes = [c_char_p]
dll.CreatePullConsumer.restype = c_void_p
dll.SetPullConsumerNameServerAddress.argtypes = [c_void_p, c_char_p]
dll.StartPullConsumer.argtypes = [c_void_p]
dll.ShutdownPullConsumer.argtypes = [c_void_p]
dll.DestroyPullConsumer.argtypes = [c_void_p]
dll.FetchSubscriptionMessageQueues.argtypes = [c_void_p, c_char_p, POINTER(POINTER(_CMessageQueue)), POINTER(c_int)]
dll.ReleaseSubscriptionMessageQueue.argtypes = [POINTER(_CMessageQueue)]
dll.Pull.argtypes = [c_void_p, POINTER(_CMessageQueue), c_char_p, c_longlong, c_int]
dll.Pull.restype = CPullResult
dll.ReleasePullResult.argtypes = [POINTER(CPullResult)]

consumer = dll.CreatePullConsumer(group.encode())
dll.SetPullConsumerNameServerAddress(consumer, namesrv.encode())
assert dll.StartPullConsumer(consumer) == 0
out = {"queues": [], "messages": [], "pulls": []}
try:
    mqs = POINTER(_CMessageQueue)()
    size = c_int(0)
    assert dll.FetchSubscriptionMessageQueues(consumer, topic.encode(), byref(mqs), byref(size)) == 0
    for i in range(size.value):
        mq = mqs[i]
        out["queues"].append([mq.topic.decode(), mq.brokerName.decode(), mq.queueId])
        offset = 0
        for _ in range(100):
            r = dll.Pull(consumer, byref(mq), expression.encode(), offset, 32)
            out["pulls"].append([mq.queueId, offset, STATUS[r.pullStatus], r.nextBeginOffset, r.minOffset, r.maxOffset])
            for j in range(r.size):
                m = r.msgFoundList[j]
                out["messages"].append(
                    {
                        "queue_id": dll.GetMessageQueueId(m),
                        "queue_offset": dll.GetMessageQueueOffset(m),
                        "tags": (dll.GetMessageTags(m) or b"").decode(),
                        "keys": (dll.GetMessageKeys(m) or b"").decode(),
                        "body": (dll.GetMessageBody(m) or b"").hex(),
                        "id": (dll.GetMessageId(m) or b"").decode(),
                        "color": (dll.GetMessageProperty(m, b"color") or b"").decode(),
                        "reconsume_times": dll.GetMessageReconsumeTimes(m),
                    }
                )
            status = r.pullStatus
            next_offset = r.nextBeginOffset
            dll.ReleasePullResult(byref(r))
            if STATUS[status] not in ("FOUND", "NO_MATCHED_MSG") or next_offset == offset:
                break
            offset = next_offset
        r = dll.Pull(consumer, byref(mq), expression.encode(), 10_000, 32)
        out["pulls"].append([mq.queueId, 10_000, STATUS[r.pullStatus], r.nextBeginOffset, r.minOffset, r.maxOffset])
        dll.ReleasePullResult(byref(r))
    dll.ReleaseSubscriptionMessageQueue(mqs)
finally:
    dll.ShutdownPullConsumer(consumer)
    dll.DestroyPullConsumer(consumer)
print(json.dumps(out))
