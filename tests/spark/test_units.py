"""The connector's pure parts, without a JVM: options, offsets, rate limits, record decoding."""

from __future__ import annotations

import json
import zlib

import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

from pymq.client.queue_reader import records_before
from pymq.protocol.record import SYSFLAG_COMPRESSED, encode_properties, encode_record, offset_msg_id, pack_host
from pymq.spark_connector.arrow import records_to_batch
from pymq.spark_connector.offsets import backlog, carry_forward, from_json, offsets_behind_latest, rate_limit, to_json
from pymq.spark_connector.options import OptionError, parse_duration, parse_sink_options, parse_source_options
from pymq.spark_connector.source import DataLossError, PymqBatchReader, PymqStreamReader


def test_required_options_and_defaults() -> None:
    """namesrv and topic are required; streams start at latest, batches at earliest; topics are a sorted set."""
    with pytest.raises(OptionError, match="namesrv"):
        parse_source_options({"topic": "t"}, streaming=True)
    with pytest.raises(OptionError, match="topic"):
        parse_source_options({"namesrv": "h:1"}, streaming=True)
    s = parse_source_options({"namesrv": "h:1", "topic": "b, a,b"}, streaming=True)
    assert s.topics == ("a", "b") and s.starting == "latest" and s.fail_on_data_loss and s.tags == "*"
    b = parse_source_options({"NAMESRV": "h:1", "Topic": "a"}, streaming=False)
    assert b.starting == "earliest" and b.ending == "latest"


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"startingOffsets": "latest"}, False, "not allowed for batch"),
        ({"endingOffsets": "latest"}, True, "only for batch"),
        ({"startingOffsets": "{bad"}, True, "JSON"),
        ({"startingOffsets": '{"t": 3}'}, True, "brokerName"),
        ({"maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "20"}, True, "must not exceed"),
        ({"maxOffsetsPerTrigger": "ten"}, True, "integer"),
        ({"failOnDataLoss": "maybe"}, True, "true or false"),
    ],
)
def test_bad_options_are_clear_errors(options: dict, streaming: bool, message: str) -> None:
    """Bad option values raise OptionError saying what is wrong."""
    with pytest.raises(OptionError, match=message):
        parse_source_options({"namesrv": "h:1", "topic": "t", **options}, streaming=streaming)


def test_durations() -> None:
    """maxTriggerDelay accepts Spark-like durations."""
    assert [parse_duration(d) for d in ("15m", "10 seconds", "500ms", "1h", "30")] == [900, 10, 0.5, 3600, 30]
    with pytest.raises(OptionError):
        parse_duration("soon")


def test_offsets_json_is_canonical() -> None:
    """Offsets serialise with string keys sorted at every level, whatever order they were built in."""
    a = to_json({("t2", "b", 10): 5, ("t1", "b", 2): 1, ("t1", "a", 0): 3})
    b = to_json({("t1", "a", 0): 3, ("t1", "b", 2): 1, ("t2", "b", 10): 5})
    assert a == b and list(a) == ["t1", "t2"] and list(a["t1"]) == ["a", "b"]
    assert from_json(a) == {("t2", "b", 10): 5, ("t1", "b", 2): 1, ("t1", "a", 0): 3}
    assert list(to_json({("t", "a", 10): 1, ("t", "a", 9): 1})["t"]["a"]) == ["9", "10"]


def test_rate_limit_splits_by_backlog() -> None:
    """maxOffsetsPerTrigger is shared in proportion to backlog; small shares round up; never past latest."""
    start = {("t", "a", 0): 0, ("t", "a", 1): 0, ("t", "a", 2): 10}
    latest = {("t", "a", 0): 100, ("t", "a", 1): 1, ("t", "a", 2): 10}
    end = rate_limit(start, latest, 10)
    assert end == {("t", "a", 0): 9, ("t", "a", 1): 1, ("t", "a", 2): 10}
    assert rate_limit(start, latest, 1000) == latest
    assert backlog(start, latest) == 101


def rec(body: bytes, props: dict, offset: int = 0, sys_flag: int = 0) -> bytes:
    return encode_record(
        b"orders", body, encode_properties(props), queue_id=3, queue_offset=offset, physical_offset=77,
        sys_flag=sys_flag, store_host=pack_host("127.0.0.1", 10911), born_timestamp=1000, store_timestamp=2000,
    )  # fmt: skip


def test_records_to_arrow_columns() -> None:
    """Records decode to the source schema's columns; compressed bodies are inflated; tags filter rows."""
    chunk = (
        rec(b"a", {"UNIQ_KEY": "U1", "TAGS": "x", "KEYS": "k1 k2"}, 0)
        + rec(zlib.compress(b"b" * 100), {"TAGS": "y"}, 1, SYSFLAG_COMPRESSED)
        + rec(b"c", {"TAGS": "x", "p": "v"}, 2)
    )
    batch = records_to_batch([chunk], "broker-a")
    rows = batch.to_pylist()
    assert [r["queueOffset"] for r in rows] == [0, 1, 2] and rows[0]["brokerName"] == "broker-a"
    assert rows[0]["msgId"] == "U1" and rows[0]["keys"] == ["k1", "k2"] and rows[0]["queueId"] == 3
    assert rows[1]["body"] == b"b" * 100 and rows[1]["msgId"] == offset_msg_id(pack_host("127.0.0.1", 10911), 77)
    assert dict(rows[2]["properties"])["p"] == "v" and rows[2]["storeTimestamp"].timestamp() == 2.0
    filtered = records_to_batch([chunk], "broker-a", frozenset({"x"}))
    assert [r["body"] for r in filtered.to_pylist()] == [b"a", b"c"]


def test_records_before_cuts_at_the_end_offset() -> None:
    """A pull answer that ran past a partition's end keeps only the records below it (read from fixed fields)."""
    chunk = b"".join(rec(b"m%d" % off, {"TAGS": "x"}, off) for off in (4, 6, 9, 12))
    assert records_before(chunk, 100) is chunk

    def offsets(buf: bytes | memoryview) -> list[int]:
        return [r["queueOffset"] for r in records_to_batch([bytes(buf)], "b").to_pylist()]

    assert offsets(records_before(chunk, 9)) == [4, 6]
    assert offsets(records_before(memoryview(chunk), 10)) == [4, 6, 9]  # pull bodies may be memoryviews
    assert records_before(chunk, 4) == b""


def test_min_offsets_hold_like_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    """minOffsetsPerTrigger: the first trigger is not held, later small backlogs wait maxTriggerDelay after the
    last trigger that was not held; availableNow never holds (it would end with rows unread)."""
    now = [1000.0]
    monkeypatch.setattr("pymq.spark_connector.source.time.monotonic", lambda: now[0])
    opts = {"namesrv": "h:1", "topic": "t", "minOffsetsPerTrigger": "50", "maxTriggerDelay": "10s"}
    reader = PymqStreamReader(parse_source_options(opts, streaming=True))
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(50)
    k = ("t", "a", 0)
    assert reader._apply_limit({k: 0}, {k: 5}, limit) == {k: 5}  # first trigger: not held
    now[0] += 3
    assert reader._apply_limit({k: 5}, {k: 10}, limit) == {k: 5}  # 5 < 50 and 3 s < 10 s: held
    now[0] += 6
    assert reader._apply_limit({k: 5}, {k: 60}, limit) == {k: 60}  # 55 >= 50: goes at once, restarts the clock
    now[0] += 9
    assert reader._apply_limit({k: 60}, {k: 61}, limit) == {k: 60}  # 9 s after that batch: still held
    now[0] += 1
    assert reader._apply_limit({k: 60}, {k: 61}, limit) == {k: 61}  # 10 s: the delay is over
    reader._available_now = True  # what prepareForTriggerAvailableNow sets (it also asks the brokers)
    now[0] += 1
    assert reader._apply_limit({k: 61}, {k: 62}, limit) == {k: 62}


def stream_reader(**options: str) -> PymqStreamReader:
    return PymqStreamReader(parse_source_options({"namesrv": "h:1", "topic": "t", **options}, streaming=True))


A0, A1, B0, B1 = ("t", "broker-a", 0), ("t", "broker-a", 1), ("t", "broker-b", 0), ("t", "broker-b", 1)


def fake_brokers(reader: PymqStreamReader, answers: dict) -> None:
    """The brokers the reader's planner sees: ``{queue: (min, max)}`` of those that answer now."""
    reader._planner.min_max = lambda **_kw: dict(answers)  # type: ignore[method-assign]


def test_carry_forward_keeps_missing_queues_and_never_goes_back() -> None:
    """Queues that did not answer keep their offsets; a max offset below the start is reported, not taken."""
    begin = {A0: 10, B0: 40}
    latest, went_back = carry_forward(begin, {A0: 15, A1: 3})
    assert latest == {A0: 15, A1: 3, B0: 40} and went_back == {}
    latest, went_back = carry_forward(begin, {A0: 15, B0: 7})
    assert latest == {A0: 15, B0: 40} and went_back == {B0: (40, 7)}
    assert rate_limit({A0: 0, B0: 40}, {A0: 100, B0: 40}, 10) == {A0: 10, B0: 40}  # a capped batch keeps B0 too


def test_latest_offset_carries_queues_of_a_broker_that_left() -> None:
    """broker-b missing from one trigger keeps its offsets in the end offset (it was re-read from 0 before)."""
    reader = stream_reader()
    start = to_json({A0: 5, B0: 400, B1: 400})
    fake_brokers(reader, {A0: (0, 9)})  # broker-b stopped: not in the route, or not answering
    end = reader.latestOffset(start, ReadAllAvailable())
    assert from_json(end) == {A0: 9, B0: 400, B1: 400}
    assert from_json(reader.reportLatestOffset()) == {A0: 9, B0: 400, B1: 400}
    fake_brokers(reader, {A0: (0, 9), B0: (0, 410), B1: (0, 400)})  # back
    again = reader.latestOffset(end, ReadAllAvailable())
    assert from_json(again) == {A0: 9, B0: 410, B1: 400}


def test_offsets_going_back_is_data_loss() -> None:
    """A broker whose max offset falls below the query's position: failOnDataLoss fails, otherwise stays put."""
    start = to_json({A0: 5, B0: 400})
    strict = stream_reader()
    fake_brokers(strict, {A0: (0, 5), B0: (0, 20)})
    with pytest.raises(DataLossError, match="went back from 400 to 20"):
        strict.latestOffset(start, ReadAllAvailable())
    lenient = stream_reader(failOnDataLoss="false")
    fake_brokers(lenient, {A0: (0, 5), B0: (0, 20)})
    assert from_json(lenient.latestOffset(start, ReadAllAvailable())) == {A0: 5, B0: 400}
    fake_brokers(lenient, {A0: (0, 5), B0: (0, 450)})
    assert from_json(lenient.latestOffset(start, ReadAllAvailable())) == {A0: 5, B0: 450}


def test_read_of_the_placeholder_partition_is_empty() -> None:
    """With no partitions PySpark reads InputPartition(None): that yields nothing (it raised AttributeError)."""
    opts = {"namesrv": "h:1", "topic": "t"}
    assert list(PymqStreamReader(parse_source_options(opts, streaming=True)).read(InputPartition(None))) == []
    assert list(PymqBatchReader(parse_source_options(opts, streaming=False)).read(InputPartition(None))) == []


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"startingOffsetByTimestamp": "{}"}, True, "unknown option 'startingOffsetByTimestamp'"),
        ({"maxOffsetPerTrigger": "10"}, True, "unknown option 'maxOffsetPerTrigger'"),
        ({"includeHeaders": "true"}, True, "properties"),
        ({"subscribePattern": "o.*"}, True, "exactly one of topic"),
        ({"endingTimestamp": "5"}, True, "only for batch"),
        ({"endingOffsetsByTimestamp": "{}"}, True, "only for batch"),
        ({"startingOffsetsByTimestamp": "[1]"}, False, "JSON must be"),
        ({"consumerGroup": "g", "groupIdPrefix": "p"}, True, "not both"),
    ],
)
def test_unknown_and_conflicting_options_are_rejected(options: dict, streaming: bool, message: str) -> None:
    """An option the source does not know is an error naming it (it was silently ignored)."""
    with pytest.raises(OptionError, match=message):
        parse_source_options({"namesrv": "h:1", "topic": "t", **options}, streaming=streaming)


def test_pattern_and_kafka_style_options_parse() -> None:
    """subscribePattern instead of topic; subscribe is topic's Kafka name; includeHeaders=false is harmless."""
    s = parse_source_options({"namesrv": "h:1", "subscribePattern": "orders-.*"}, streaming=True)
    assert s.pattern == "orders-.*" and s.topics == ()
    with pytest.raises(OptionError, match="regular expression"):
        parse_source_options({"namesrv": "h:1", "subscribePattern": "(["}, streaming=True)
    s = parse_source_options({"namesrv": "h:1", "subscribe": "a,b", "includeHeaders": "false"}, streaming=False)
    assert s.topics == ("a", "b")
    with pytest.raises(OptionError, match="unknown option 'partitions'"):
        parse_sink_options({"namesrv": "h:1", "partitions": "3"})
    assert parse_sink_options({"namesrv": "h:1", "checkpointLocation": "/tmp/x"}).topic is None


def test_offsets_json_must_name_every_queue_and_stay_in_range() -> None:
    """Like Kafka, offsets JSON covers every subscribed queue; an offset past a queue's end is an error."""
    planner = PymqStreamReader(parse_source_options({"namesrv": "h:1", "topic": "t"}, streaming=True))._planner
    bounds = {A0: (0, 10), B0: (5, 20)}
    ok = planner._from_json(to_json({A0: -2, B0: -1}), bounds, "startingOffsets")
    assert ok == {A0: 0, B0: 20}
    with pytest.raises(OptionError, match=r"missing: \['t/broker-b/0'\]"):
        planner._from_json(to_json({A0: 3}), bounds, "startingOffsets")
    with pytest.raises(OptionError, match="past the queue's end"):
        planner._from_json(to_json({A0: 11, B0: 5}), bounds, "startingOffsets")
    with pytest.raises(OptionError, match="not subscribed"):
        planner._from_json(to_json({A0: 1, B0: 5, B1: 0}), bounds, "startingOffsets")
    with pytest.raises(OptionError, match="use -1 for latest"):
        planner._from_json(to_json({A0: -2, B0: 5}), bounds, "endingOffsets", ending=True)


def test_group_id_prefix_names_a_group_per_run() -> None:
    """groupIdPrefix gives each run a group <prefix>-<random>, kept for the run; consumerGroup is used as is."""
    a, b = stream_reader(groupIdPrefix="etl"), stream_reader(groupIdPrefix="etl")
    assert a.group() == a.group() and a.group().startswith("etl-") and a.group() != b.group()
    assert stream_reader(consumerGroup="fixed").group() == "fixed" and stream_reader().group() is None


def test_offsets_behind_latest_from_progress() -> None:
    """Kafka's avg/max/minOffsetsBehindLatest computed from a progress entry's endOffset and latestOffset."""
    progress = {
        "endOffset": json.dumps(to_json({A0: 10, B0: 40})),
        "latestOffset": to_json({A0: 30, B0: 40, B1: 6}),
    }
    assert offsets_behind_latest(progress) == {
        "minOffsetsBehindLatest": 0.0, "maxOffsetsBehindLatest": 20.0, "avgOffsetsBehindLatest": 26 / 3,
    }  # fmt: skip
    assert offsets_behind_latest({"endOffset": None, "latestOffset": None}) == {}


def test_security_options_reach_the_clients() -> None:
    """accessKey/secretKey and the tls options become client keyword options (source and sink)."""
    src = parse_source_options(
        {"namesrv": "h:1", "topic": "t", "accesskey": "app", "secretkey": "s3cret", "tls": "true", "tlscafile": "/ca"},
        streaming=True,
    )
    assert dict(src.security) == {"access_key": "app", "secret_key": "s3cret", "tls": True, "tls_ca_file": "/ca"}
    sink = parse_sink_options({"namesrv": "h:1", "accessKey": "app", "secretKey": "s3cret"})
    assert dict(sink.security) == {"access_key": "app", "secret_key": "s3cret"}
    with pytest.raises(OptionError, match="both accessKey and secretKey"):
        parse_sink_options({"namesrv": "h:1", "accesskey": "app"})


def test_arrow_decode_bench_exits_non_zero_when_the_decoders_differ(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/arrow_decode_bench.py checks its two decoders agree: 0 when they do, 1 naming the difference."""
    from benchmarks.arrow_decode_bench import main
    from pymq.spark_connector.arrow import records_to_batch_by_rows

    small = ["--chunks", "2", "--repeat", "1"]
    assert main(small) == 0 and "same batch" in capsys.readouterr().out

    def drops_a_row(chunks: list[bytes], broker: str) -> object:
        batch = records_to_batch(chunks, broker)
        return batch.slice(0, batch.num_rows - 1)

    def renames_the_broker(chunks: list[bytes], broker: str) -> object:
        return records_to_batch(chunks, broker + "-other")

    assert main(small, decoders=(records_to_batch_by_rows, drops_a_row)) == 1
    assert "DECODERS DIFFER: 480 rows vs 479" in capsys.readouterr().out
    assert main(small, decoders=(records_to_batch_by_rows, renames_the_broker)) == 1
    assert "DECODERS DIFFER: column" in capsys.readouterr().out
