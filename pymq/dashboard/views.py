"""Pure formatting for the pages: message bodies, system topics, paging, times and sizes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

#: topic prefixes and names a cluster makes for itself; hidden from the topic list by default
SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC", "TBW102")
SYSTEM_TOPICS = {"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest", "DefaultCluster"}


def is_system_topic(topic: str, cluster_names: set[str] | frozenset[str] = frozenset()) -> bool:
    """A topic the cluster keeps for itself (retry, dead letters, timers, the default topic ...)."""
    return topic.startswith(SYSTEM_PREFIXES) or topic in SYSTEM_TOPICS or topic in cluster_names


@dataclass(frozen=True)
class Page:
    """One page of a list: its items, its number (from 1) and how many pages there are."""

    items: list[Any]
    number: int
    pages: int
    total: int


def paginate(items: list[Any], page: int, size: int) -> Page:
    size = max(1, size)
    pages = max(1, -(-len(items) // size))
    number = min(max(1, page), pages)
    return Page(items[(number - 1) * size : number * size], number, pages, len(items))


def body_views(body: bytes) -> dict[str, str | None]:
    """The body as text (None unless UTF-8), as pretty JSON (None unless it parses) and as hex."""
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None and text.strip()[:1] in ("{", "["):
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    return {"text": text, "json": pretty, "hex": hex_dump(body)}


def hex_dump(data: bytes, width: int = 16, limit: int = 64 * 1024) -> str:
    """``offset  hex bytes  ascii`` lines, like ``xxd`` (the first ``limit`` bytes)."""
    lines = []
    for off in range(0, min(len(data), limit), width):
        chunk = data[off : off + width]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<{width * 3 - 1}}  {text}")
    if len(data) > limit:
        lines.append(f"... {len(data) - limit} more bytes")
    return "\n".join(lines)


def fmt_ms(ms: int | float | None) -> str:
    """An epoch-milliseconds time as ``YYYY-MM-DD HH:MM:SS`` UTC ('' for none)."""
    if not ms or ms <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))


def fmt_bytes(n: int | float | None) -> str:
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def fmt_duration(seconds: float | None) -> str:
    s = int(seconds or 0)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {s}s"


def perm_string(perm: int) -> str:
    """RocketMQ's permission bits as ``RW``, ``R-``, ``-W`` or ``--``."""
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-")


def parse_perm(read: bool, write: bool) -> int:
    return (4 if read else 0) | (2 if write else 0)


def preview(body: bytes, limit: int = 60) -> str:
    """The start of a body as one line of text (undecodable bytes as U+FFFD)."""
    text = body[:limit].decode("utf-8", errors="replace").replace("\n", " ")
    return text + ("…" if len(body) > limit else "")


def running_info_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    """A consumer's owned queues (``mqTable`` of its running info) as table rows, the stuck-looking first:
    most cached messages, then the oldest consume. A 4.x client's unparsed answer has none."""
    rows = []
    for entry in info.get("mqTable") or []:
        if not isinstance(entry, dict):
            continue
        mq, pq = entry.get("mq") or {}, entry.get("pq") or {}
        rows.append({
            "topic": mq.get("topic", ""),
            "brokerName": mq.get("brokerName", ""),
            "queueId": mq.get("queueId", ""),
            "cached": int(pq.get("cachedMsgCount") or 0),
            "cachedBytes": int(pq.get("cachedMsgSizeInBytes") or 0),
            "minOffset": pq.get("cachedMsgMinOffset", -1),
            "maxOffset": pq.get("cachedMsgMaxOffset", -1),
            "commitOffset": pq.get("commitOffset", -1),
            "locked": bool(pq.get("locked")),
            "lastLock": pq.get("lastLockTimestamp") or 0,
            "lastPull": pq.get("lastPullTimestamp") or 0,
            "lastConsume": pq.get("lastConsumeTimestamp") or 0,
            "dropped": bool(pq.get("droped")),
        })  # fmt: skip
    rows.sort(key=lambda r: (-r["cached"], r["lastConsume"], r["topic"], r["brokerName"], str(r["queueId"])))
    return rows


#: ConsumeMessageDirectlyResult's consumeResult, as the page says it
CONSUME_RESULTS = {
    "CR_SUCCESS": "consumed it (SUCCESS)",
    "CR_RETURN_NULL": "consumed it (the listener returned None)",
    "CR_LATER": "asked to consume it later",
    "CR_THROW_EXCEPTION": "failed",
}


def consume_directly_text(group: str, result: dict[str, Any]) -> str:
    """One line for a resend's answer: who, what the listener said, the remark, the time it took."""
    what = CONSUME_RESULTS.get(str(result.get("consumeResult")), str(result.get("consumeResult")))
    remark = f": {result['remark']}" if result.get("remark") else ""
    return (
        f"resent to {group}: client {result.get('clientId') or '?'} (through {result.get('brokerName') or '?'}) "
        f"{what}{remark} [{result.get('consumeResult')}, {result.get('spentTimeMills', 0)} ms]"
    )


ACL_PERMS = ("DENY", "PUB", "SUB", "PUB|SUB")


def perm_table(text: str, field: str) -> dict[str, str]:
    """A form's ``name=PERM`` entries (separated by commas or new lines) as a map."""
    out = {}
    for item in text.replace("\n", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, perm = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"{field}: {item!r} is not name=PERM")
        out[name.strip()] = perm.strip().upper()
    return out


def acl_account_from_form(form: Any) -> dict[str, Any]:
    """The accounts page's form as UPDATE_AND_CREATE_ACL_CONFIG's account (an empty secret keeps the old one)."""
    account: dict[str, Any] = {
        "accessKey": str(form.get("access_key") or "").strip(),
        "admin": form.get("admin") == "yes",
        "defaultTopicPerm": str(form.get("default_topic_perm") or "DENY"),
        "defaultGroupPerm": str(form.get("default_group_perm") or "DENY"),
        "topicPerms": perm_table(str(form.get("topic_perms") or ""), "topic permissions"),
        "groupPerms": perm_table(str(form.get("group_perms") or ""), "group permissions"),
        "whiteRemoteAddress": str(form.get("white_remote_address") or "").strip(),
    }
    if not account["accessKey"]:
        raise ValueError("the access key must not be empty")
    secret = str(form.get("secret_key") or "")
    if secret:
        account["secretKey"] = secret
    return account


def acl_form_values(account: dict[str, Any] | None) -> dict[str, Any]:
    """An account as GET_ACL_ACCOUNTS describes it, as the form's initial values (never a secret)."""
    a = account or {}
    return {
        "access_key": a.get("accessKey", ""),
        "admin": bool(a.get("admin")),
        "default_topic_perm": a.get("defaultTopicPerm", "DENY"),
        "default_group_perm": a.get("defaultGroupPerm", "DENY"),
        "topic_perms": ", ".join(f"{k}={v}" for k, v in (a.get("topicPerms") or {}).items()),
        "group_perms": ", ".join(f"{k}={v}" for k, v in (a.get("groupPerms") or {}).items()),
        "white_remote_address": ", ".join(a.get("whiteRemoteAddress") or []),
    }


def consumed_by(
    offsets: dict[str, dict[str, int]], topic: str, queue_id: int, queue_offset: int
) -> list[dict[str, Any]]:
    """Which groups have committed past a message (GET_ALL_CONSUMER_OFFSET's ``topic@group`` table of the broker
    that stores it): per group with an offset on its queue, that offset and whether it is past the message."""
    rows = []
    for key, queues in offsets.items():
        name, at, group = key.partition("@")
        if not at or name != topic or str(queue_id) not in queues:
            continue
        committed = int(queues[str(queue_id)])
        rows.append({"group": group, "offset": committed, "consumed": committed > queue_offset})
    return sorted(rows, key=lambda r: (not r["consumed"], r["group"]))


def trail_notes(properties: dict[str, str]) -> list[str]:
    """What a message's properties say of its way in: a timer or delay level, a transaction, a merge."""
    notes = []
    due = properties.get("TIMER_OUT_MS") or properties.get("TIMER_DELIVER_MS")
    if due and due.isdigit():
        notes.append(f"timer message: due at {fmt_ms(int(due))} UTC")
    elif properties.get("DELAY", "0") not in ("", "0"):
        notes.append(f"delayed message: delay level {properties['DELAY']}")
    if properties.get("TRAN_MSG") == "true":
        notes.append(f"transactional: committed by producer group {properties.get('PGROUP', '?')}")
    if properties.get("MERGE_COUNT"):
        notes.append(f"merged delay: {properties['MERGE_COUNT']} message(s) merged into this one")
    return notes


def per_broker_text(done: str, result: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """A flash for an edit made on every broker: ``("ok", done)``, or a warning naming the brokers that refused."""
    failed = [f"{where}: {r['error']}" for where, r in result.items() if "error" in r]
    if not failed:
        return "ok", done
    return "warn", f"{done}; not on {'; '.join(failed)}"
