"""Exact reads of compacted and retention-truncated streams through the data source.

The compacted stream has 4 KiB segments and a 1 s cleaner; every even offset shares
the key ``dup`` so that compaction removes all but the newest of them from closed
segments, and every odd offset has its own key so that it always stays. Whatever the
subscription delivers, the connector must emit each offset of its range at most
once and never one outside it.

Compacted streams are not deleted afterwards: deleting one while its cleaner runs
can crash a v1.9.0 server (reference/liftbridge-server.md), which the whole session
shares.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync import Client, ServerError, StartAt, StopAt
from tests.integration.conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TIMEOUT = 240


def _offsets(client: Client, stream: str) -> set[int]:
    """Every offset partition 0 holds up to its HW, read with the plain client.

    Raises:
        TimeoutError: no message for 10 s before the HW was reached.
    """
    hw = client.fetch_partition_metadata(stream, 0).high_watermark
    found: set[int] = set()
    with client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.offset(hw)) as sub:
        while not found or max(found) < hw:
            try:
                offset = sub.get(10.0).offset
            except StopIteration:
                break
            if offset <= hw:
                found.add(offset)
            else:
                break
    return found


def _poll_offsets(client: Client, stream: str, done: Any, timeout: float = 120.0) -> set[int]:
    """Read the offsets until ``done(offsets)``; the cleaner's reader errors are retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            offsets = _offsets(client, stream)
        except (ServerError, TimeoutError):
            offsets = set()  # "segment has been closed": the cleaner is at work
        if offsets and done(offsets):
            return offsets
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{stream}: condition not met within {timeout}s")
        time.sleep(0.2)


def _compacted(client: Client, count: int) -> str:
    """A compacted stream of ``count`` messages, waited for until compaction ran."""
    name = unique("spark-compact")
    client.create_stream(
        name, name, compact_enabled=True, segment_max_bytes=4096, cleaner_interval=1.0
    )
    futures = [
        client.publish_async(name, f"v{i}".encode(), key=b"dup" if i % 2 == 0 else f"k{i}".encode())
        for i in range(count)
    ]
    for future in futures:
        future.result()
    # Compaction ran once offsets 2 and 10 (even, in closed segments) are gone.
    _poll_offsets(client, name, lambda found: not {2, 10} & found)
    return name


def _check(
    rows: list[tuple[int, bytes]], low: int, high: int, before: set[int], after: set[int]
) -> None:
    """Rows are exactly the offsets of [low, high) present, each once, with its value."""
    offsets = [offset for offset, _ in rows]
    assert len(offsets) == len(set(offsets)), "an offset was emitted twice"
    found = set(offsets)
    assert all(low <= o < high for o in found), sorted(o for o in found if not low <= o < high)
    wanted = set(range(low, high))
    # The cleaner only removes offsets, so the rows lie between the two client reads.
    assert wanted & after <= found <= wanted & before
    assert {o for o in wanted if o % 2} <= found  # unique keys are never compacted
    for offset, value in rows:
        assert value == f"v{offset}".encode()


def _rows(df: Any) -> list[tuple[int, bytes]]:
    return [(r.offset, bytes(r.value)) for r in df.select("offset", "value").collect()]


def _reader(spark: Any, address: str, stream: str) -> Any:
    return spark.read.format("liftbridge").option("brokers", address).option("stream", stream)


def test_batch_reads_of_a_compacted_stream_stay_in_range(
    spark: Any, liftbridge_address: str, liftbridge_client: Client
) -> None:
    stream = _compacted(liftbridge_client, 1501)
    before = _poll_offsets(liftbridge_client, stream, bool)
    ending = json.dumps({stream: {"0": 11}})
    starting = json.dumps({stream: {"0": 1}})
    narrow = _reader(spark, liftbridge_address, stream).option("startingOffsets", starting)
    narrow_rows = _rows(narrow.option("endingOffsets", ending).load())
    split_rows = _rows(
        _reader(spark, liftbridge_address, stream).option("maxRecordsPerPartition", "100").load()
    )
    # Offset 2 is compacted away: a range starting there is a gap, not data loss.
    gap = _reader(spark, liftbridge_address, stream)
    gap_rows = _rows(gap.option("startingOffsets", json.dumps({stream: {"0": 2}})).load())
    after = _poll_offsets(liftbridge_client, stream, bool)
    _check(narrow_rows, 1, 11, before, after)
    _check(split_rows, 0, 1501, before, after)
    _check(gap_rows, 3, 1501, before, after)
    assert min(o for o, _ in gap_rows) == 3


def test_stream_of_a_compacted_stream_into_parquet_with_restart(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, tmp_path: Path
) -> None:
    stream = _compacted(liftbridge_client, 1001)
    before = _poll_offsets(liftbridge_client, stream, bool)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run(limit: int) -> Any:
        query = (
            spark.readStream.format("liftbridge")
            .option("brokers", liftbridge_address)
            .option("stream", stream)
            # Offset 2 is compacted away: starting there is not data loss.
            .option("startingOffsets", json.dumps({stream: {"0": 2}}))
            .option("maxOffsetsPerTrigger", str(limit))
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(TIMEOUT), "availableNow query did not finish"
        assert query.exception() is None
        return query

    run(100)
    more = [
        liftbridge_client.publish_async(stream, f"v{i}".encode(), key=f"k{i}".encode())
        for i in range(1001, 1101)
    ]
    for future in more:
        future.result()
    before |= set(range(1001, 1101))
    query = run(100)
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end[stream] == {"0": 1101}
    after = _poll_offsets(liftbridge_client, stream, bool)
    rows = _rows(spark.read.parquet(str(out)))
    _check(rows, 2, 1101, before, after)


def _publish_plain(client: Client, stream: str, numbers: range) -> None:
    futures = [client.publish_async(stream, f"v{i}".encode()) for i in numbers]
    for future in futures:
        future.result()


def _wait_truncated(client: Client, stream: str, timeout: float = 120.0) -> None:
    """Block until offset 0 is gone from ``stream`` (retention ran)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with client.subscribe(stream, start=StartAt.earliest()) as sub:
                if sub.get(2.0).offset > 0:
                    return
        except TimeoutError:
            return  # nothing left at all
        except ServerError:
            pass  # the cleaner replaced the segment under the reader
    raise TimeoutError(f"{stream}: retention did not run within {timeout}s")


def _no_holes_and_nothing_retained_skipped(
    client: Client, stream: str, rows: Any, earliest: int, end: int
) -> None:
    """``rows`` hold each offset once, none before ``earliest`` (the start seen before
    the read) or from ``end`` on, and every offset the log still holds now: only what
    retention removed, before or during the read, was skipped."""
    got = [o for o, _ in rows]
    assert len(got) == len(set(got)), "an offset delivered twice"
    assert set(got) <= set(range(earliest, end))
    start_now = min(_poll_offsets(client, stream, lambda found: True))
    missing = set(range(start_now, end)) - set(got)
    assert not missing, f"retained offsets skipped: {sorted(missing)[:5]}"


def test_retention_loss_fails_or_is_skipped(
    spark: Any, liftbridge_address: str, liftbridge_client: Client, tmp_path: Path
) -> None:
    stream = unique("spark-retained")
    liftbridge_client.create_stream(
        stream,
        stream,
        retention_max_messages=200,
        segment_max_bytes=4096,
        cleaner_interval=1.0,
    )
    _publish_plain(liftbridge_client, stream, range(1000))
    _wait_truncated(liftbridge_client, stream)
    # v1.9.0 may drop every closed segment; later messages give the log a new start.
    _publish_plain(liftbridge_client, stream, range(1000, 1050))
    offsets = _poll_offsets(liftbridge_client, stream, lambda found: min(found) > 5)
    earliest = min(offsets)
    assert offsets == set(range(earliest, 1050))  # retention leaves no holes
    starting = json.dumps({stream: {"0": 5}})
    reader = _reader(spark, liftbridge_address, stream).option("startingOffsets", starting)
    # The cleaner runs on (every second): the log's start may move on between any two
    # looks, so each check below takes the start it saw before as a lower bound and the
    # start after it as an upper one.
    with pytest.raises(Exception, match=r"partition 0: offsets 5\.\.\d+ are gone") as err:
        reader.load().collect()
    assert "failOnDataLoss=false" in str(err.value)
    gone = re.search(r"offsets 5\.\.(\d+) are gone", str(err.value))
    assert gone is not None and int(gone.group(1)) >= earliest - 1
    rows = _rows(reader.option("failOnDataLoss", "false").load())
    _no_holes_and_nothing_retained_skipped(liftbridge_client, stream, rows, earliest, 1050)

    # Streaming, in micro-batches of 100 offsets: the first ones lie wholly before the
    # log's start. Skipped with failOnDataLoss=false, then a restart reads only new rows.
    out = tmp_path / "out"

    def run(checkpoint: str, fail_on_loss: str) -> Any:
        query = (
            spark.readStream.format("liftbridge")
            .option("brokers", liftbridge_address)
            .option("stream", stream)
            .option("startingOffsets", starting)
            .option("maxOffsetsPerTrigger", "100")
            .option("failOnDataLoss", fail_on_loss)
            .load()
            .writeStream.format("parquet")
            .option("path", str(out if fail_on_loss == "false" else tmp_path / "other"))
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(TIMEOUT), "availableNow query did not finish"
        return query

    with pytest.raises(Exception, match="partition 0: offsets 5..104 are gone"):
        run("failing", "true")
    assert run("skipping", "false").exception() is None
    _publish_plain(liftbridge_client, stream, range(1050, 1070))
    assert run("skipping", "false").exception() is None
    streamed = _rows(spark.read.parquet(str(out)))
    _no_holes_and_nothing_retained_skipped(liftbridge_client, stream, streamed, earliest, 1070)
