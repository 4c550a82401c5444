"""The dashboard's pure parts: body views, system topics, paging, charts' series and reset targets."""

from __future__ import annotations

import pytest

from pymq.dashboard import views
from pymq.dashboard.history import History, sparkline
from pymq.dashboard.pages_groups import reset_timestamp
from pymq.dashboard.pages_topics import parse_attributes


def test_body_views_text_json_and_hex() -> None:
    v = views.body_views(b'{"a": [1, 2]}')
    assert v["text"] == '{"a": [1, 2]}'
    assert v["json"] == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert v["hex"] == '00000000  7b 22 61 22 3a 20 5b 31 2c 20 32 5d 7d           {"a": [1, 2]}'


def test_a_binary_body_has_only_hex() -> None:
    v = views.body_views(bytes(range(250, 256)) + b"\n")
    assert v["text"] is None and v["json"] is None
    assert v["hex"] == "00000000  fa fb fc fd fe ff 0a" + " " * 29 + ".......".ljust(7)


def test_text_that_is_not_json_has_no_json_view() -> None:
    assert views.body_views(b"{not json")["json"] is None
    assert views.body_views(b"plain")["json"] is None


def test_hex_dump_stops_at_its_limit() -> None:
    dump = views.hex_dump(b"x" * 40, limit=32)
    assert dump.splitlines()[-1] == "... 8 more bytes"
    assert len(dump.splitlines()) == 3


@pytest.mark.parametrize(
    ("topic", "system"),
    [
        ("orders", False),
        ("%RETRY%g", True),
        ("%DLQ%g", True),
        ("rmq_sys_REVIVE_LOG_DefaultCluster", True),
        ("SCHEDULE_TOPIC_XXXX", True),
        ("TBW102", True),
        ("DefaultCluster", True),
    ],
)
def test_system_topics(topic: str, system: bool) -> None:
    assert views.is_system_topic(topic, {"DefaultCluster"}) is system


def test_paginate_clamps_the_page_number() -> None:
    items = list(range(120))
    assert views.paginate(items, 1, 50).items == list(range(50))
    last = views.paginate(items, 9, 50)
    assert (last.number, last.pages, last.total, last.items) == (3, 3, 120, list(range(100, 120)))
    assert views.paginate([], 1, 50).pages == 1


def test_formatting() -> None:
    assert views.fmt_ms(0) == ""
    assert views.fmt_ms(86_400_000) == "1970-01-02 00:00:00"
    assert views.fmt_bytes(512) == "512 B"
    assert views.fmt_bytes(3 * 1024 * 1024) == "3.0 MiB"
    assert views.fmt_duration(3725) == "1h 2m"
    assert views.perm_string(6) == "RW" and views.perm_string(4) == "R-" and views.perm_string(0) == "--"
    assert views.parse_perm(True, False) == 4
    assert views.preview(b"a\nb" * 30, limit=5) == "a ba …"


def test_history_keeps_the_last_window_only() -> None:
    h = History(keep_seconds=60)
    for t in range(0, 200, 10):
        h.record("lag:g", float(t), float(t))
    assert [t for t, _ in h.points("lag:g")] == [float(t) for t in range(130, 200, 10)]
    assert h.names("lag:") == ["lag:g"] and h.names("put:") == []


def test_sparkline_scales_to_the_box() -> None:
    line = sparkline([(0.0, 0.0), (5.0, 10.0), (10.0, 5.0)], width=102, height=52)
    assert line["points"] == "1.0,51.0 51.0,1.0 101.0,26.0"
    assert (line["max"], line["last"], line["count"]) == (10.0, 5.0, 3)
    one = sparkline([(7.0, 3.0)], width=102, height=52)
    assert one["points"] == "1.0,1.0 101.0,1.0" and one["count"] == 1
    assert sparkline([])["points"] == ""


def test_reset_targets() -> None:
    assert reset_timestamp("latest", "") == -1
    assert reset_timestamp("earliest", "") == -2
    assert reset_timestamp("time", "1970-01-02T00:01") == 86_460_000
    with pytest.raises(ValueError, match="time"):
        reset_timestamp("time", "yesterday")
    with pytest.raises(ValueError, match="target"):
        reset_timestamp("sideways", "")


def test_topic_attributes_from_the_form() -> None:
    assert parse_attributes("priority.levels=4, +message.type = NORMAL,") == {
        "priority.levels": "4",
        "message.type": "NORMAL",
    }
    assert parse_attributes("") == {}
    with pytest.raises(ValueError, match="attributes: 'oops' is not key=value"):
        parse_attributes("oops")


def test_pages_escape_what_the_cluster_says() -> None:
    """Message bodies, keys and error texts come from users: the templates escape them."""
    from pymq.dashboard.state import make_templates

    html = make_templates().get_template("error.html").render(title="t", message="<script>alert(1)</script>")
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def test_topic_rates_are_deltas_between_two_polls() -> None:
    """Per-topic TPS: (messages now - messages at the last poll) / seconds between; never negative."""
    from typing import Any, cast

    from pymq.dashboard.poller import Poller

    class Totals:
        def __init__(self) -> None:
            self.now: dict[str, tuple[int, int]] = {}

        async def topic_traffic(self) -> dict[str, tuple[int, int]]:
            return self.now

    totals = Totals()
    history = History()
    poller = Poller(cast(Any, totals), history, 1.0)
    totals.now = {"quiet": (5, 5)}
    await poller._topic_rates(100.0)
    assert history.names() == []  # one poll: no rate yet
    totals.now = {"quiet": (5, 5), "busy": (20, 4)}
    await poller._topic_rates(102.0)
    assert history.points("tput:busy") == [(102.0, 10.0)] and history.points("tget:busy") == [(102.0, 2.0)]
    assert "tput:quiet" not in history.names()  # no traffic since the last poll: no chart
    totals.now = {"quiet": (5, 5), "busy": (3, 0)}  # a restarted broker counts from 0 again
    await poller._topic_rates(104.0)
    assert history.points("tput:busy")[-1] == (104.0, 0.0) and history.points("tget:busy")[-1] == (104.0, 0.0)


def test_cluster_page_shows_the_failover_controller_or_says_failover_is_manual() -> None:
    from pymq.dashboard.state import make_templates

    page = make_templates().get_template("cluster.html")
    controller = {
        "groups": [
            {
                "group": "broker-a",
                "master": "127.0.0.1:20911",
                "epoch": 3,
                "syncSet": ["127.0.0.1:10911", "127.0.0.1:20911"],
                "alive": ["127.0.0.1:20911"],
            }
        ],
        "elections": [
            {
                "group": "broker-a",
                "old": "127.0.0.1:10911",
                "new": "127.0.0.1:20911",
                "epoch": 3,
                "reason": "master heartbeat lapsed",
            }
        ],
    }
    html = page.render(brokers=[], namesrvs=["127.0.0.1:9876"], controller=controller)
    assert 'id="controller"' in html and "broker-a" in html and "master heartbeat lapsed" in html
    assert "<code>127.0.0.1:10911</code>" in html and ">3<" in html
    manual = page.render(brokers=[], namesrvs=["127.0.0.1:9876"], controller=None)
    assert 'id="controller"' not in manual and "No nameserver runs a controller" in manual


def test_connection_tables_show_each_clients_protocol() -> None:
    """Producers and a group's clients list the protocol (grpc: a 5.x client through the front end);
    rows from brokers that do not say one are pymq's."""
    from pymq.dashboard.state import make_templates

    conns = [
        {"clientId": "c-grpc", "clientAddr": "a", "language": "PYTHON", "version": 0, "protocol": "grpc"},
        {"clientId": "c-old", "clientAddr": "a", "language": "JAVA", "version": 0},
    ]
    html = (
        make_templates()
        .get_template("producers.html")
        .render(producers=[("t5", [{**c, "brokerName": "b"} for c in conns])], request=None)
    )
    rows = [line for line in html.splitlines() if "<code>c-" in line]
    assert "<td>grpc</td>" in rows[0] and "<td>pymq</td>" in rows[1], rows
    html = (
        make_templates()
        .get_template("group.html")
        .render(
            group="g",
            progress={"totalLag": 0, "totalInFlight": 0, "queues": []},
            config=None,
            connection={
                "consumeType": "x",
                "messageModel": "y",
                "consumeFromWhere": "z",
                "subscriptions": [],
                "connections": conns,
            },
            request=None,
        )
    )
    rows = [line for line in html.splitlines() if "<code>c-" in line]
    assert "<td>grpc</td>" in rows[0] and "<td>pymq</td>" in rows[1], rows


def test_running_info_rows_put_the_stuck_looking_queues_first() -> None:
    """A consumer's owned queues for its page: most cached first, then the oldest consume; 4.x raw has none."""
    info = {
        "mqTable": [
            {"mq": {"topic": "t", "brokerName": "b", "queueId": 0}, "pq": {"cachedMsgCount": 0, "commitOffset": 9}},
            {
                "mq": {"topic": "t", "brokerName": "b", "queueId": 1},
                "pq": {"cachedMsgCount": 3, "cachedMsgSizeInBytes": 30, "locked": True, "lastConsumeTimestamp": 5},
            },
            {
                "mq": {"topic": "t", "brokerName": "a", "queueId": 2},
                "pq": {"cachedMsgCount": 3, "lastConsumeTimestamp": 2},
            },
        ]
    }
    rows = views.running_info_rows(info)
    assert [(r["brokerName"], r["queueId"]) for r in rows] == [("a", 2), ("b", 1), ("b", 0)]
    assert rows[1]["cachedBytes"] == 30 and rows[1]["locked"] is True and rows[2]["commitOffset"] == 9
    assert rows[2]["lastPull"] == 0 and rows[2]["dropped"] is False
    assert views.running_info_rows({"format": "remoting", "raw": "{...}"}) == []


def test_the_accounts_form_both_ways() -> None:
    form = {
        "access_key": " app ",
        "secret_key": "",
        "admin": "yes",
        "default_topic_perm": "SUB",
        "topic_perms": "orders=pub|sub,\naudit=SUB",
        "group_perms": "",
        "white_remote_address": "10.0.0.*",
    }
    account = views.acl_account_from_form(form)
    assert account == {
        "accessKey": "app",
        "admin": True,
        "defaultTopicPerm": "SUB",
        "defaultGroupPerm": "DENY",
        "topicPerms": {"orders": "PUB|SUB", "audit": "SUB"},
        "groupPerms": {},
        "whiteRemoteAddress": "10.0.0.*",
    }  # no secretKey: the account keeps its secret
    assert views.acl_account_from_form({**form, "secret_key": "s3cret!"})["secretKey"] == "s3cret!"
    with pytest.raises(ValueError, match="is not name=PERM"):
        views.acl_account_from_form({**form, "group_perms": "billing"})
    with pytest.raises(ValueError, match="access key"):
        views.acl_account_from_form({**form, "access_key": " "})
    described = {
        "accessKey": "app",
        "admin": True,
        "defaultTopicPerm": "SUB",
        "topicPerms": {"orders": "PUB|SUB"},
        "groupPerms": {},
        "whiteRemoteAddress": ["10.0.0.*", "10.1.0.0/16"],
    }
    values = views.acl_form_values(described)
    assert values["topic_perms"] == "orders=PUB|SUB" and values["white_remote_address"] == "10.0.0.*, 10.1.0.0/16"
    assert values["default_group_perm"] == "DENY" and "secret_key" not in values
    assert views.acl_form_values(None)["access_key"] == ""


def test_a_resend_answer_in_one_line() -> None:
    result = {"consumeResult": "CR_THROW_EXCEPTION", "remark": "ValueError: bad", "spentTimeMills": 12}
    text = views.consume_directly_text("g", {**result, "clientId": "c@1", "brokerName": "broker-a"})
    assert text == "resent to g: client c@1 (through broker-a) failed: ValueError: bad [CR_THROW_EXCEPTION, 12 ms]"


def test_which_groups_consumed_a_message_and_its_notes() -> None:
    offsets = {"orders@billing": {"0": 5, "1": 2}, "orders@audit": {"1": 3}, "other@billing": {"1": 9}}
    assert views.consumed_by(offsets, "orders", 1, 2) == [
        {"group": "audit", "offset": 3, "consumed": True},
        {"group": "billing", "offset": 2, "consumed": False},
    ]
    assert views.consumed_by(offsets, "orders", 7, 0) == []
    notes = views.trail_notes({"TIMER_OUT_MS": "1700000000000", "TRAN_MSG": "true", "PGROUP": "tx"})
    assert notes == ["timer message: due at 2023-11-14 22:13:20 UTC", "transactional: committed by producer group tx"]
    assert views.trail_notes({"DELAY": "3", "MERGE_COUNT": "4"}) == [
        "delayed message: delay level 3",
        "merged delay: 4 message(s) merged into this one",
    ]
    assert views.trail_notes({"DELAY": "0"}) == []


def test_an_edit_on_every_broker_says_which_refused() -> None:
    assert views.per_broker_text("done", {"a/0": {"created": True}}) == ("ok", "done")
    result = {"a/0": {"created": True}, "b/0": {"error": "[code 16] not writable"}}
    assert views.per_broker_text("done", result) == ("warn", "done; not on b/0: [code 16] not writable")
