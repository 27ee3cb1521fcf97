"""Rows exactly inside the requested range: compacted streams, a misbehaving client, and a
start after the newest message."""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from liftbridge_sync import Client, Message, ServerError, StartAt, StopAt
from liftbridge_sync._proto import api_pb2
from liftbridge_sync.models import wire_message
from liftbridge_sync.options import ClientOptions
from liftbridge_sync.subscription.stats import SubscriptionStats
from tests.integration._pubdata import Record, publish
from tests.integration.conftest import unique
from tests.waiting import wait_until

pytest.importorskip("pyspark")

from pyspark.sql.types import LongType, StructField, StructType  # noqa: E402

from liftbridge_sync.spark.ranges import DataLossError, OffsetRange, read_batches  # noqa: E402
from liftbridge_sync.spark.source_options import SourceOptions  # noqa: E402

pytestmark = [pytest.mark.timeout(400)]


class _Scripted:
    """A subscription handing out whatever offsets it was given, then ending; it counts
    a resubscribe (a failover, as ``stats()`` reports it) before the batch that begins
    at ``resubscribed_at``."""

    def __init__(self, offsets: list[int], resubscribed_at: int | None = None) -> None:
        self._messages = iter(
            Message.from_proto(api_pb2.Message(offset=o, value=b"v%d" % o, stream="s"))
            for o in offsets
        )
        self._resubscribed_at = resubscribed_at
        self._resubscribes = 0

    def get(self, timeout: float | None = None) -> Message:
        return next(self._messages)

    def get_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """Up to three at a time: batches that mix good offsets with bad ones."""
        batch = list(itertools.islice(self._messages, min(max_messages, 3)))
        if not batch:
            raise StopIteration
        if batch[0].offset == self._resubscribed_at:
            self._resubscribes += 1
        return batch

    def _get_many_wire(
        self, max_messages: int, timeout: float | None = None
    ) -> list[api_pb2.Message]:
        """What the Spark source reads: :meth:`get_many`'s batches as wire messages."""
        return [wire_message(m) for m in self.get_many(max_messages, timeout)]

    def stats(self) -> SubscriptionStats:
        return SubscriptionStats(resubscribes=self._resubscribes)

    def __enter__(self) -> _Scripted:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class _ScriptedClient:
    """Reads get ``offsets``; a look for the oldest message gets ``earliest``."""

    def __init__(
        self, offsets: list[int], resubscribed_at: int | None = None, earliest: int = 0
    ) -> None:
        self.offsets = offsets
        self.resubscribed_at = resubscribed_at
        self.earliest = earliest

    def subscribe(self, stream: str, **kwargs: Any) -> _Scripted:
        if kwargs["start"] == StartAt.earliest():
            return _Scripted([self.earliest])
        return _Scripted(self.offsets, self.resubscribed_at)


@pytest.mark.parametrize(
    ("delivered", "rows"),
    [
        ([0, 1, 2, 2, 1, 5, 11, 12], [1, 2, 5]),  # below the start, repeats, past the end
        ([3, 4, 9, 10, 13], [3, 4, 9, 10]),  # the last offset, then one past it
        ([11], []),
        (list(range(1, 11)), list(range(1, 11))),  # whole batches inside the range
        ([1, 2, 3, 4, 5, 5, 6, 7, 4, 8], [1, 2, 3, 4, 5, 6, 7, 8]),  # repeats within batches
    ],
)
def test_a_range_never_yields_a_row_outside_it_whatever_the_client_does(
    monkeypatch: pytest.MonkeyPatch, delivered: list[int], rows: list[int]
) -> None:
    monkeypatch.setattr(Client, "for_process", staticmethod(lambda _: _ScriptedClient(delivered)))
    options = SourceOptions(
        client=ClientOptions(addresses=("127.0.0.1:1",)), stream="s", fail_on_data_loss=False
    )
    schema = StructType([StructField("offset", LongType())])
    batches = read_batches(options, OffsetRange("s", 0, 1, 11), schema)  # the reader's path
    got = [offset for batch in batches for offset in batch.column("offset").to_pylist()]
    assert got == rows


def _read(client: _ScriptedClient, fail_on_data_loss: bool) -> list[int]:
    options = SourceOptions(
        client=ClientOptions(addresses=("127.0.0.1:1",)),
        stream="s",
        fail_on_data_loss=fail_on_data_loss,
    )
    schema = StructType([StructField("offset", LongType())])
    batches = read_batches(options, OffsetRange("s", 0, 0, 20), schema)
    return [offset for batch in batches for offset in batch.column("offset").to_pylist()]


def test_retention_loss_where_a_read_resubscribed_mid_range_is_data_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After 0..2 the subscription lost its broker and resubscribed at 3; retention had
    deleted 3..6 meanwhile, so the server began at its oldest message, 7. Only the gap at
    the resubscribe can tell (the range began long before), and it is data loss."""
    delivered = [0, 1, 2, 7, 8, 9, 10]
    lost = _ScriptedClient(delivered, resubscribed_at=7, earliest=7)
    monkeypatch.setattr(Client, "for_process", staticmethod(lambda _: lost))
    with pytest.raises(DataLossError, match=r"partition 0: offsets 3\.\.6 are gone"):
        _read(lost, fail_on_data_loss=True)
    assert _read(lost, fail_on_data_loss=False) == delivered  # skipped, with a warning


def test_a_compaction_gap_where_a_read_resubscribed_is_no_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivered = [0, 1, 2, 7, 8, 9, 10]
    compacted = _ScriptedClient(delivered, resubscribed_at=7, earliest=0)
    monkeypatch.setattr(Client, "for_process", staticmethod(lambda _: compacted))
    assert _read(compacted, fail_on_data_loss=True) == delivered


def test_the_tail_of_a_range_deleted_by_retention_is_data_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The subscription ended at 12 (retention deleted the rest of the log meanwhile,
    and the oldest message left is 25): offsets 13..19 of the range are gone."""
    ended = _ScriptedClient(list(range(13)), earliest=25)
    monkeypatch.setattr(Client, "for_process", staticmethod(lambda _: ended))
    with pytest.raises(DataLossError, match=r"offsets 13\.\.19 are gone"):
        _read(ended, fail_on_data_loss=True)


class _ClosedThenTruncated:
    """Reads 0..2, then the server closes the segment under the reader (retention deleting
    it); the read resumes at 3, which the server refuses because the oldest message left,
    25, is past the whole rest of the range."""

    def __init__(self) -> None:
        self.starts: list[int] = []

    def subscribe(self, stream: str, **kwargs: Any) -> Any:
        start = kwargs["start"]
        if start == StartAt.earliest():
            return _Scripted([25])
        self.starts.append(start.at_offset)
        if start.at_offset == 0:
            return _ClosingAfter([0, 1, 2])
        raise ServerError("stop offset is before start offset")


class _ClosingAfter(_Scripted):
    def get_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        try:
            return super().get_many(max_messages, timeout)
        except StopIteration:
            raise ServerError("failed to reinitialize reader: segment has been closed") from None


def test_the_rest_of_a_range_refused_after_a_closed_segment_is_data_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The refusal of a range wholly before the log's start was data loss only where the
    range began; after resuming mid-range it escaped as a ServerError, failing the
    query even with failOnDataLoss=false."""
    truncated = _ClosedThenTruncated()
    monkeypatch.setattr(Client, "for_process", staticmethod(lambda _: truncated))
    with pytest.raises(DataLossError, match=r"partition 0: offsets 3\.\.19 are gone"):
        _read(truncated, fail_on_data_loss=True)  # type: ignore[arg-type]
    assert truncated.starts == [0, 3]
    assert _read(truncated, fail_on_data_loss=False) == [0, 1, 2]  # type: ignore[arg-type]


# ---------------------------------------------------------------------- real server


def _reader(spark: Any, address: str, stream: str) -> Any:
    return spark.read.format("liftbridge").option("brokers", address).option("stream", stream)


@pytest.fixture(scope="module")
def compacted(liftbridge_address: str) -> Iterator[tuple[str, list[int]]]:
    """A compacted stream (1 KiB segments, a fast cleaner, even offsets sharing 10 keys)
    once compaction removed offsets, and the offsets left. Never deleted: v1.9.0 crashed
    deleting a compacted stream while its cleaner ran."""
    name = unique("spark-compacted")
    with Client(liftbridge_address) as client:
        client.create_stream(
            name, name, compact_enabled=True, segment_max_bytes=1024, cleaner_interval=0.5
        )
        publish(
            liftbridge_address,
            name,
            [
                Record(b"x" * 20, key=f"e{i % 10}".encode() if i % 2 == 0 else f"o{i}".encode())
                for i in range(300)
            ],
        )
        left: list[int] = []
        changed_at = [time.monotonic()]

        def compacted_and_settled() -> bool:
            # Unchanged for six cleaner intervals, not across two quick reads: on a
            # loaded machine the cleaner may not run between those, and a log compacted
            # in part was taken as final (see test_subscribe_ranges' fixture).
            sub = client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest())
            now = [m.offset for m in sub]
            if now != left or len(now) == 300:
                left[:] = now
                changed_at[0] = time.monotonic()
                return False
            return time.monotonic() - changed_at[0] >= 3.0

        wait_until(compacted_and_settled, timeout=60, what="compaction to remove offsets and stop")
    yield name, left


def test_batch_read_of_a_compacted_stream_is_exact(
    spark: Any, liftbridge_address: str, compacted: tuple[str, list[int]]
) -> None:
    stream, left = compacted
    assert 10 not in left  # the stop offset was compacted away: the case that read 11
    starting = json.dumps({stream: {"0": 1}})
    ending = json.dumps({stream: {"0": 11}})
    df = (
        _reader(spark, liftbridge_address, stream)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .load()
    )
    assert sorted(r.offset for r in df.collect()) == [o for o in left if 1 <= o <= 10]
    split = (
        _reader(spark, liftbridge_address, stream)
        .option("maxRecordsPerPartition", "50")
        .option("failOnDataLoss", "false")
        .load()
    )
    assert sorted(r.offset for r in split.collect()) == left  # no row twice, none outside


def test_starting_timestamp_after_the_newest_message_is_empty(
    spark: Any, liftbridge_address: str, compacted: tuple[str, list[int]]
) -> None:
    stream, _ = compacted
    rows = _reader(spark, liftbridge_address, stream).load().orderBy("offset").collect()
    after_ms = int(rows[-1].timestamp.timestamp() * 1000) + 1000
    later = _reader(spark, liftbridge_address, stream).option("startingTimestamp", str(after_ms))
    assert later.load().count() == 0


def test_streaming_read_of_a_compacted_stream_writes_each_row_once(
    spark: Any, liftbridge_address: str, compacted: tuple[str, list[int]], tmp_path: Path
) -> None:
    """Micro-batches of at most 100 offsets into parquet: a range that read past its end
    wrote those rows again in the next batch (1,020 rows for 1,001 messages)."""
    stream, left = compacted
    out = tmp_path / "out"
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", liftbridge_address)
        .option("stream", stream)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .option("failOnDataLoss", "false")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "availableNow query did not finish"
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 2
    rows = spark.read.parquet(str(out)).select("offset").collect()
    assert sorted(r.offset for r in rows) == left


def test_a_read_end_fixed_at_a_restarted_servers_stale_watermark_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a restart v1.9.0 answers the watermark it last checkpointed (-1 for a young
    stream) until it commits a new message: a batch read to ``latest``, a streaming
    query's start and an ``availableNow`` run ended there and read nothing, without a
    word. Where the source fixes a read's end, a watermark behind the newest offset that
    does not move gets a WARNING naming what the read leaves out."""
    from liftbridge_sync.spark.offsets import high_watermarks
    from liftbridge_sync.testing import LiftbridgeServer

    with LiftbridgeServer() as server:
        with Client(server.address) as client:
            client.create_stream("stale", "stale")
            for i in range(10):
                client.publish("stale", b"m%d" % i)
        server.restart()  # within 5 s of the creation: no watermark checkpointed yet
        with Client(server.address) as client:
            info = client.fetch_partition_metadata("stale", 0)
            assert (info.high_watermark, info.newest_offset) == (-1, 9)  # the server's doing
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="liftbridge_sync.spark"):
                assert high_watermarks(client, "stale", [0]) == {0: -1}
                assert not _spark_logs(caplog)  # only where a read's end is fixed
                assert high_watermarks(client, "stale", [0], warn_stale=True) == {0: -1}
            [told] = _spark_logs(caplog)
            assert "offsets 0..9 are written but not committed" in told, told
            assert "not moving" in told


def _spark_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "liftbridge_sync.spark"]
