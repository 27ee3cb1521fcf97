"""Pure parts of liftbridge_sync.spark: option parsing, row mapping, admission control.

None of these import PySpark, so they run without the ``spark`` extra.
"""

from __future__ import annotations

import json
import pickle
import re

import pytest

from liftbridge_sync import AckPolicy, ConfigurationError
from liftbridge_sync.spark.admission import TriggerDelay, cap_offsets
from liftbridge_sync.spark.config import client_options, get_duration, lower_keys
from liftbridge_sync.spark.offsets import (
    CREATED,
    EARLIEST,
    LATEST,
    created_of,
    from_json_dict,
    parse_spec,
    timestamps_for,
    to_json_dict,
)
from liftbridge_sync.spark.rows import column_index, to_message
from liftbridge_sync.spark.sink import SinkOptions, publish_partition
from liftbridge_sync.spark.source_options import (
    READ_OPTIONS,
    WRITE_OPTIONS,
    SourceOptions,
    check_known,
)


def test_importing_the_package_does_not_import_pyspark() -> None:
    import subprocess
    import sys

    code = (
        "import sys, liftbridge_sync, liftbridge_sync.spark;"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_schema_step_loads_neither_the_client_nor_grpc_nor_arrow() -> None:
    """Spark asks for the schema in a Python worker of its own, and starts its workers
    afresh after a minute idle: that worker pays every import the data source makes.
    The reader it plans with (another worker) still loads the client."""
    import subprocess
    import sys

    pytest.importorskip("pyspark")
    code = """
import sys
import pyspark.sql.datasource
from liftbridge_sync.spark.datasource import LiftbridgeDataSource
source = LiftbridgeDataSource({"brokers": "127.0.0.1:1", "stream": "orders"})
assert source.schema().startswith("key binary, value binary"), source.schema()
heavy = ("grpc", "h2", "pyarrow", "liftbridge_sync.client", "liftbridge_sync.spark.sink")
loaded = [name for name in heavy if name in sys.modules]
assert not loaded, loaded
from pyspark.sql.types import BinaryType, StructField, StructType
source.reader(StructType([StructField("value", BinaryType())]))
assert "liftbridge_sync.client" in sys.modules and "pyarrow" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_client_options_passthrough() -> None:
    options = client_options(
        "a:1, b:2",
        {
            "liftbridge.rpctimeoutms": "1500",
            "liftbridge.maxinflight": "7",
            "liftbridge.retry.maxattempts": "2",
            "liftbridge.tls.servername": "lb.example",
        },
    )
    assert options.addresses == ("a:1", "b:2")
    assert options.rpc_timeout == 1.5 and options.max_in_flight == 7
    assert options.retry.max_attempts == 2
    assert options.tls is not None and options.tls.server_name == "lb.example"
    with pytest.raises(ConfigurationError, match="unknown option 'liftbridge.nope'"):
        client_options("a:1", {"liftbridge.nope": "1"})
    with pytest.raises(ConfigurationError, match="'liftbridge.maxInFlight' must be an integer"):
        client_options("a:1", {"liftbridge.maxinflight": "x"})
    with pytest.raises(ConfigurationError, match="'brokers' is required"):
        client_options(None, {})


def test_source_options_are_case_insensitive_and_picklable() -> None:
    parsed = SourceOptions.parse(
        {"Brokers": "a:1", "path": "orders", "MAXOFFSETSPERTRIGGER": "5", "includeHeaders": "TRUE"}
    )
    assert parsed.stream == "orders" and parsed.max_offsets_per_trigger == 5
    assert parsed.include_headers is True
    assert pickle.loads(pickle.dumps(parsed)) == parsed
    with pytest.raises(ConfigurationError, match="unknown read option 'startingoffset'"):
        SourceOptions.parse({"brokers": "a:1", "stream": "s", "startingOffset": "earliest"})


def test_options_of_the_other_kind_and_typos_are_named() -> None:
    """A write option on a read was "unknown" (it is known: in the wrong place), and a
    typo got no hint."""
    with pytest.raises(ConfigurationError, match=r"'partitioner' is for writes only"):
        SourceOptions.parse({"brokers": "a:1", "stream": "s", "PARTITIONER": "key"})
    with pytest.raises(ConfigurationError, match=r"\(did you mean 'failOnDataLoss'\?\)"):
        SourceOptions.parse({"brokers": "a:1", "stream": "s", "failOnDatLoss": "false"})
    with pytest.raises(ConfigurationError, match=r"unknown read option 'bogus'; known: brokers,"):
        SourceOptions.parse({"brokers": "a:1", "stream": "s", "bogus": "1"})


@pytest.mark.parametrize(
    ("kind", "option", "instead"),
    [
        ("read", "kafka.bootstrap.servers", "here it is 'brokers'"),
        ("read", "subscribe", "here it is 'stream' or load"),
        ("read", "assign", "here they are 'stream' and 'partitions'"),
        ("read", "subscribePattern", "one stream a query"),
        ("read", "kafka.group.id", "no group"),
        ("read", "groupIdPrefix", "no group"),
        ("read", "kafka.max.poll.records", "liftbridge.*"),
        ("write", "topic", "here it is 'stream' or save"),
        ("write", "kafka.bootstrap.servers", "here it is 'brokers'"),
        ("write", "kafka.acks", "liftbridge.*"),
    ],
)
def test_a_kafka_connector_option_says_what_takes_its_place(
    kind: str, option: str, instead: str
) -> None:
    """A Kafka connector user's ``kafka.bootstrap.servers`` or ``subscribe`` was refused
    as unknown with nothing said of ``brokers`` or ``stream`` (no spelling is near)."""
    options = {"brokers": "a:1", "stream": "s", option: "x"}
    known = READ_OPTIONS if kind == "read" else WRITE_OPTIONS
    with pytest.raises(ConfigurationError, match=rf"the Kafka connector's.*{re.escape(instead)}"):
        check_known(lower_keys(options), known, kind)


def test_parse_spec() -> None:
    assert parse_spec("startingOffsets", None, "s", [0, 1], EARLIEST) == {0: -2, 1: -2}
    assert parse_spec("x", "Latest", "s", [0], EARLIEST) == {0: LATEST}
    assert parse_spec("x", '{"s": {"1": 7}}', "s", [0, 1], LATEST) == {0: -1, 1: 7}
    for bad, message in [
        ("{", "must be 'earliest', 'latest' or JSON"),
        ('{"t": {"0": 1}}', "keyed by the stream 's'"),
        ('{"s": {"9": 1}}', "partition 9 is not read"),
        ('{"s": {"0": -3}}', "must be an int from -2 to 9223372036854775807"),
        ('{"s": {"0": "1"}}', "must be an int from -2 to 9223372036854775807"),
        ('{"s": {"0": 9223372036854775808}}', "must be an int from -2 to 9223372036854775807"),
    ]:
        with pytest.raises(ConfigurationError, match="option 'x'"):
            parse_spec("x", bad, "s", [0, 1], LATEST)
        with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
            parse_spec("x", bad, "s", [0, 1], LATEST)


def test_offset_json_round_trip() -> None:
    offsets = {1: 5, 0: 3}
    as_json = to_json_dict("s", offsets)
    assert as_json == {"s": {"0": 3, "1": 5}}
    assert from_json_dict("s", as_json) == offsets
    with pytest.raises(ConfigurationError, match="new checkpointLocation"):
        from_json_dict("other", as_json)
    assert created_of("s", as_json) == 0  # offsets without a creation time
    stamped = to_json_dict("s", offsets, 1_764_000_000_000_000_000)
    assert stamped == {"s": {"0": 3, "1": 5}, CREATED: {"s": 1_764_000_000_000_000_000}}
    assert from_json_dict("s", stamped) == offsets
    assert created_of("s", stamped) == 1_764_000_000_000_000_000
    # Progress pasted into startingOffsets: the creation time is ignored.
    assert parse_spec("startingOffsets", json.dumps(stamped), "s", [0, 1], LATEST) == {0: 3, 1: 5}


def test_cap_offsets_splits_the_budget_in_proportion() -> None:
    assert cap_offsets({0: 0, 1: 0}, {0: 10, 1: 10}, 100) == {0: 10, 1: 10}
    assert cap_offsets({0: 0, 1: 0, 2: 0}, {0: 30, 1: 30, 2: 30}, 40) == {0: 14, 1: 13, 2: 13}
    assert cap_offsets({0: 5}, {0: 5, 1: 8}, 4) == {0: 5, 1: 4}  # new partition starts at 0
    assert cap_offsets({0: 9}, {0: 5}, 4) == {0: 9}  # never below the start
    capped = cap_offsets({0: 0, 1: 0}, {0: 1000, 1: 1}, 10)
    assert sum(capped.values()) == 10
    # A partition whose share rounds to nothing is not starved behind a backlog (it
    # got nothing until partition 0 had caught up).
    assert capped == {0: 9, 1: 1}
    assert cap_offsets({0: 0, 1: 0, 2: 0}, {0: 1000, 1: 2, 2: 3}, 3) == {0: 2, 1: 1, 2: 0}


def test_rows_map_to_messages() -> None:
    columns = column_index(["key", "value", "partition", "headers", "correlationId", "extra"])
    message = to_message(("k", b"v", 2, {"h": "x", "b": b"y"}, "c-1", object()), columns)
    assert (message.key, message.value, message.partition) == (b"k", b"v", 2)
    assert message.headers == {"h": b"x", "b": b"y"}
    assert message.correlation_id == "c-1" and message.stream is None
    pairs = to_message(("k", "v", None, [("a", b"1")], None, None), columns)
    assert pairs.headers == {"a": b"1"} and pairs.value == b"v" and pairs.partition is None
    # Liftbridge has no tombstones: a null value is an empty message (the README says so).
    assert to_message(("k", None, None, None, None, None), columns).value == b""
    for row, name in [
        ((None, 5, None, None, None, None), "column 'value' must be binary or string"),
        ((1, b"v", None, None, None, None), "column 'key' must be binary or string"),
        ((None, b"v", True, None, None, None), "column 'partition' must be an integer"),
        ((None, b"v", None, "h", None, None), "column 'headers' must be a map"),
        ((None, b"v", None, {1: b"x"}, None, None), "column 'headers': keys must be strings"),
        (
            (None, b"v", None, [("a", b"1"), ("a", b"2")], None, None),
            "column 'headers': key 'a' appears twice",
        ),
        ((None, b"v", None, None, 7, None), "column 'correlationId' must be a string"),
    ]:
        with pytest.raises(ConfigurationError, match=name):
            to_message(row, columns)
    with pytest.raises(ConfigurationError, match="need a 'value' column"):
        column_index(["key"])


def test_sink_options() -> None:
    sink = publish_partition("a:1", "s", partitioner="roundrobin", max_in_flight=10, check=False)
    assert pickle.loads(pickle.dumps(sink)) == sink
    parsed = SinkOptions.from_strings(
        {"brokers": "a:1", "stream": "s", "ackPolicy": "all", "ackTimeoutMs": "2500"}
    )
    assert parsed.ack_policy is AckPolicy.ALL and parsed.ack_timeout == 2.5
    with pytest.raises(ConfigurationError, match="'ackPolicy' must be leader, all or none"):
        SinkOptions.from_strings({"brokers": "a:1", "ackPolicy": "most"})
    with pytest.raises(ConfigurationError, match="'partitioner' must be one of"):
        SinkOptions.from_strings({"brokers": "a:1", "partitioner": "hash"})


def test_a_stream_option_and_a_different_path_are_refused() -> None:
    """``.option("stream", "a").save("b")`` wrote to ``a`` (and ``load("b")`` read ``a``)
    without a word: the path was dropped."""
    both = {"brokers": "a:1", "stream": "orders", "path": "orders-copy"}
    refused = r"option 'stream' \('orders'\) and the path of load\(\)/save\(\) \('orders-copy'\)"
    with pytest.raises(ConfigurationError, match=refused):
        SinkOptions.from_strings(both)
    with pytest.raises(ConfigurationError, match=refused):
        SourceOptions.parse(both)
    same = {**both, "path": "orders"}
    assert SinkOptions.from_strings(same).stream == "orders"
    assert SourceOptions.parse(same).stream == "orders"


def test_mapping_rows_are_read_by_name() -> None:
    from liftbridge_sync.spark.sink import RowLayout

    layout = RowLayout()
    rows = [{"value": b"a", "key": "k"}, {"key": "j", "value": b"b"}, b"raw"]
    got = [(m.key, m.value) for m in map(layout.message, rows)]
    assert got == [(b"k", b"a"), (b"j", b"b"), (None, b"raw")]
    with pytest.raises(ConfigurationError, match="rows must be pyspark Rows"):
        RowLayout().message(42)


def _parse(**options: str) -> SourceOptions:
    return SourceOptions.parse({"brokers": "a:1", "stream": "s", **options})


def test_timestamp_options() -> None:
    parsed = _parse(
        startingOffsetsByTimestamp='{"s": {"1": 1700000000000, "0": 5}}',
        startingOffsetsByTimestampStrategy="LATEST",
        endingTimestamp="1800000000000",
    )
    assert parsed.starting_timestamps == ((0, 5), (1, 1700000000000))
    assert parsed.timestamp_strategy == "latest"
    assert parsed.ending_timestamp_ms == 1800000000000
    assert _parse(startingTimestamp="7").timestamp_strategy is None  # per-option default
    assert timestamps_for("x", ((0, 5),), [0, 1]) == {0: 5}
    for options, message in [
        ({"startingOffsetsByTimestamp": "[1]"}, "must map the stream 's'"),
        ({"startingOffsetsByTimestamp": '{"s": {}}'}, "names no partition"),
        ({"startingOffsetsByTimestamp": '{"s": {"x": 1}}'}, "'x' is not a partition id"),
        ({"endingOffsetsByTimestamp": '{"s": {"0": -5}}'}, "must be epoch milliseconds"),
        ({"endingOffsetsByTimestamp": '{"s": {"0": true}}'}, "must be epoch milliseconds"),
        ({"startingOffsetsByTimestampStrategy": "error"}, "applies only with"),
        (
            {"startingTimestamp": "1", "startingOffsetsByTimestampStrategy": "earliest"},
            "must be 'error' or 'latest'",
        ),
        (
            {"startingTimestamp": "1", "startingOffsetsByTimestamp": '{"s": {"0": 1}}'},
            "'startingTimestamp' and 'startingOffsetsByTimestamp' both say where to start",
        ),
        (
            {"endingTimestamp": "1", "endingOffsetsByTimestamp": '{"s": {"0": 1}}'},
            "'endingTimestamp' and 'endingOffsetsByTimestamp' both say where to end",
        ),
    ]:
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            _parse(**options)
    with pytest.raises(ConfigurationError, match=re.escape("partition [7] is not read")):
        timestamps_for("startingOffsetsByTimestamp", ((7, 1),), [0, 1])


def test_trigger_options() -> None:
    parsed = _parse(minOffsetsPerTrigger="10", maxTriggerDelay="30s", maxOffsetsPerTrigger="10")
    assert parsed.min_offsets_per_trigger == 10 and parsed.max_trigger_delay == 30.0
    assert _parse(minOffsetsPerTrigger="1").max_trigger_delay == 900.0  # Kafka's 15m
    durations = {"15m": 900.0, "2h": 7200.0, "500ms": 0.5, "250": 0.25, "1d": 86400.0}
    for text, seconds in durations.items():
        assert get_duration({"d": text}, "d", 1.0) == seconds
    for bad in ("soon", "-1s", "5 parsecs", "0", "30d"):
        with pytest.raises(ConfigurationError, match="option 'd'"):
            get_duration({"d": bad}, "d", 1.0)
    with pytest.raises(ConfigurationError, match="applies only with 'minOffsetsPerTrigger'"):
        _parse(maxTriggerDelay="5s")
    with pytest.raises(ConfigurationError, match=re.escape("(11) is above option")):
        _parse(minOffsetsPerTrigger="11", maxOffsetsPerTrigger="10")


def test_trigger_delay_holds_until_enough_offsets_or_the_delay() -> None:
    now = [100.0]
    delay = TriggerDelay(25, 10.0, lambda: now[0])
    # As Kafka's: the first look lets a micro-batch through (it waited a whole
    # maxTriggerDelay after every start), and starts the clock.
    assert not delay.hold({0: 0}, {0: 10})
    assert delay.hold({0: 10}, {0: 20})  # 10 < 25 and no time passed
    now[0] += 5
    assert delay.hold({0: 10, 1: 0}, {0: 20, 1: 14})  # 24 < 25
    assert not delay.hold({0: 10, 1: 0}, {0: 20, 1: 15})  # 25: let through, clock restarts
    now[0] += 9.9
    assert delay.hold({0: 10}, {0: 11})
    now[0] += 0.1  # 10 s since the last batch: let through whatever is there
    assert not delay.hold({0: 10}, {0: 11})
    assert delay.hold({0: 11}, {0: 11})


def test_arrow_batches_map_to_messages_column_by_column() -> None:
    pa = pytest.importorskip("pyarrow")
    from liftbridge_sync.spark.rows import batch_messages

    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["x", "y"]),
            pa.array([b"k", None], pa.binary()),
            pa.array([b"v1", b"v2"], pa.binary()),
            pa.array([[("h", b"1")], None], headers),
            pa.array([None, 3], pa.int32()),
        ],
        names=["ignored", "key", "value", "headers", "partition"],
    )
    got = list(batch_messages(batch))
    assert [(m.key, m.value, m.partition, m.headers) for m in got] == [
        (b"k", b"v1", None, {"h": b"1"}),
        (None, b"v2", 3, None),
    ]
    as_map = pa.RecordBatch.from_arrays(
        [pa.array(["v"]), pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string()))],
        names=["value", "headers"],
    )
    assert [m.headers for m in batch_messages(as_map)] == [{"a": b"b"}]
    with pytest.raises(ConfigurationError, match="need a 'value' column"):
        list(batch_messages(pa.RecordBatch.from_arrays([pa.array([1])], names=["key"])))


def test_header_structs_are_read_by_field_name_not_unpacked_as_dicts() -> None:
    """Arrow hands a struct cell over as a dict: unpacking it as a (key, value) pair
    gave its field names. ``struct<name, data>`` wrote the header ``name: b"data"`` and
    ``struct<key, data>`` dropped every value, both without a word."""
    pa = pytest.importorskip("pyarrow")
    from liftbridge_sync.spark.rows import batch_messages

    def batch(*fields: tuple[str, object], cell: dict[str, object]) -> object:
        kind = pa.list_(pa.struct(list(fields)))
        return pa.RecordBatch.from_arrays(
            [pa.array([b"v"]), pa.array([[cell]], kind)], names=["value", "headers"]
        )

    swapped = batch(("value", pa.binary()), ("key", pa.string()), cell={"key": "h", "value": b"x"})
    assert [m.headers for m in batch_messages(swapped)] == [{"h": b"x"}]
    for names in (("name", "data"), ("key", "data"), ("k", "value")):
        other = batch(
            (names[0], pa.string()), (names[1], pa.binary()), cell={names[0]: "h", names[1]: b"x"}
        )
        with pytest.raises(ConfigurationError, match="column 'headers'.*'key' and 'value'"):
            list(batch_messages(other))


def test_plain_arrow_batches_become_publish_batch_items() -> None:
    pa = pytest.importorskip("pyarrow")
    from liftbridge_sync.spark.rows import plain_items

    values_only = pa.RecordBatch.from_arrays(
        [pa.array(["a", None]), pa.array([1, 2])], names=["value", "ignored"]
    )
    assert plain_items(values_only) == ([b"a", b""], False)
    keyed = pa.RecordBatch.from_arrays(
        [pa.array([b"v1", b"v2", b"v3"], pa.binary()), pa.array(["k", None, ""])],
        names=["value", "key"],
    )
    assert plain_items(keyed) == ([(b"k", b"v1"), b"v2", (b"", b"v3")], True)
    no_keys = pa.RecordBatch.from_arrays(
        [pa.array([b"v"], pa.binary()), pa.array([None], pa.binary())], names=["value", "key"]
    )
    assert plain_items(no_keys) == ([b"v"], False)
    # Any other sink column: the rows are not plain (they go one message at a time).
    for other in ("partition", "headers", "correlationId", "stream"):
        batch = pa.RecordBatch.from_arrays(
            [pa.array([b"v"], pa.binary()), pa.array([None], pa.string())], names=["value", other]
        )
        assert plain_items(batch) is None
    with pytest.raises(ConfigurationError, match="column 'value' must be binary or string"):
        plain_items(pa.RecordBatch.from_arrays([pa.array([1])], names=["value"]))
    with pytest.raises(ConfigurationError, match="column 'key' must be binary or string"):
        plain_items(
            pa.RecordBatch.from_arrays(
                [pa.array([b"v"], pa.binary()), pa.array([5])], names=["value", "key"]
            )
        )
    with pytest.raises(ConfigurationError, match="need a 'value' column"):
        plain_items(pa.RecordBatch.from_arrays([pa.array([b"k"])], names=["key"]))


_READ = {"brokers": "a:1", "stream": "s"}
_HUGE = "9" * 5000  # over int()'s 4,300 digits: json.loads raises a plain ValueError
# Nested past the recursion limit on every version (3.13's decoder takes 3,000 levels).
_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"partitions": f"[{_HUGE}]"}, "option 'partitions' must be JSON like"),
        ({"partitions": _DEEP}, "option 'partitions' must be JSON like .*nested too deeply"),
        ({"partitions": _HUGE}, "option 'partitions' must list partition ids"),
        ({"partitions": ""}, "option 'partitions' is empty"),
        ({"partitions": " "}, "option 'partitions' is empty"),
        ({"partitions": "1_0"}, "option 'partitions' must list partition ids"),
        ({"partitions": '["1"]'}, None),  # a JSON string of digits reads as the id
        ({"startingOffsetsByTimestamp": f'{{"s": {{"0": {_HUGE}}}}}'}, "must be JSON like"),
        ({"startingOffsetsByTimestamp": '{"s": {"0": 1, "00": 2}}'}, "'00' is not a partit"),
        # JSON's own repeats: json.loads kept the last, and the read took it silently.
        ({"startingOffsetsByTimestamp": '{"s": {"0": 1, "0": 2}}'}, "names '0' twice"),
        ({"startingOffsetsByTimestamp": '{"s": {"+0": 1}}'}, "'\\+0' is not a partition"),
        ({"maxOffsetsPerTrigger": str(2**63)}, "'maxOffsetsPerTrigger' must be at most"),
        ({"minPartitions": str(2**64)}, "'minPartitions' must be at most"),
        ({"minPartitions": "1_000"}, "'minPartitions' must be an integer"),
        ({"minPartitions": "\u0661"}, "'minPartitions' must be an integer"),  # Arabic 1
        ({"minPartitions": _HUGE}, "'minPartitions' must be at most"),
        ({"startingTimestamp": "-" + _HUGE}, "'startingTimestamp' must be >= 0"),
        ({"minPartitions": "+5"}, None),
        ({"pollTimeoutMs": "0.5"}, "'pollTimeoutMs' must be from 1 to"),
        ({"pollTimeoutMs": "inf"}, "^option 'pollTimeoutMs' must be a number of millis"),
        ({"pollTimeoutMs": "1_000"}, "'pollTimeoutMs' must be a number of milliseconds"),
        ({"pollTimeoutMs": "1e3"}, None),
        ({"liftbridge.rpcTimeoutMs": "1e-9"}, "'liftbridge.rpcTimeoutMs' must be from 1 to"),
        ({"liftbridge.rpcTimeoutMs": "inf"}, "'liftbridge.rpcTimeoutMs' must be a number"),
        ({"liftbridge.retry.maxAttempts": str(2**64)}, "'liftbridge.retry.maxAttempts' must"),
        ({"stream": ""}, "option 'stream' is empty"),
        ({"stream": "my stream"}, "option 'stream' \\('my stream'\\): 'stream' must not"),
        ({"stream": " s "}, None),  # trimmed, as Kafka's connector trims a topic
    ],
)
def test_odd_read_option_values_are_refused_by_name(
    options: dict[str, str], refused: str | None
) -> None:
    """Found by a probe of every option with odd values: each of these leaked a plain
    ValueError or RecursionError, or was taken silently (an empty list of partitions
    as all of them, 2**64 as a count, a sub-millisecond wait)."""
    if refused is None:
        SourceOptions.parse({**_READ, **options})
        return
    with pytest.raises(ConfigurationError, match=refused):
        SourceOptions.parse({**_READ, **options})


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"startingOffsets": f'{{"s": {{"0": {_HUGE}}}}}'}, "'earliest', 'latest' or JSON"),
        ({"startingOffsets": '{"s": {"0": 1, "00": 2}}'}, "'00' is not a partition id"),
        ({"startingOffsets": '{"s": {"0_0": 1}}'}, "'0_0' is not a partition id"),
        # JSON's own repeats: json.loads kept the last, and the read took it silently.
        ({"startingOffsets": '{"s": {"0": 9, "0": 3}}'}, "names '0' twice in one JSON"),
        ({"endingOffsets": '{"s": {"0": 9}, "s": {"0": 3}}'}, "names 's' twice in one JSON"),
        ({"startingOffsets": '{"s": {" 0": 1}}'}, "' 0' is not a partition id"),
        ({"startingOffsets": '{"s": {"+0": 1}}'}, "'\\+0' is not a partition id"),
        ({"endingOffsets": _DEEP}, "'endingOffsets' must be .*nested too deeply"),
    ],
)
def test_odd_offset_json_is_refused_by_name(options: dict[str, str], refused: str) -> None:
    ((option, raw),) = options.items()
    with pytest.raises(ConfigurationError, match=refused):
        parse_spec(option, raw, "s", [0, 1], -1)


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"stream": ""}, "option 'stream' is empty"),
        ({"ackTimeoutMs": "0.001"}, "'ackTimeoutMs' must be from 1 to"),
        ({"ackTimeoutMs": "inf"}, "^option 'ackTimeoutMs' must be a number of milliseconds"),
        ({"maxInFlight": str(2**64)}, "'maxInFlight' must be at most"),
        ({"maxInFlght": "5"}, "unknown write option 'maxinflght' \\(did you mean 'maxInFlight'"),
        ({"startingOffsets": "earliest"}, "'startingOffsets' is for reads only"),
        # Every task would have failed on the executors (publishes refuse them).
        ({"stream": "__cursors"}, "'stream': '__cursors' is reserved by the server"),
    ],
)
def test_odd_write_option_values_are_refused_by_name(options: dict[str, str], refused: str) -> None:
    """``SinkOptions.from_strings`` is public: it refuses unknown options itself, as the
    data source's writer did before calling it (a typo there was dropped)."""
    with pytest.raises(ConfigurationError, match=refused):
        SinkOptions.from_strings({"brokers": "a:1", "stream": "s", **options})
    assert SinkOptions.from_strings({"brokers": "a:1", "stream": " s "}).stream == "s"
