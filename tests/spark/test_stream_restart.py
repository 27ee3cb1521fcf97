"""A streaming source's server restarting under it (the source's calls, no Spark job)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from liftbridge_sync import AckPolicy, BrokerUnavailableError, Client, NoSuchPartitionError
from liftbridge_sync.options import ClientOptions, RetryPolicy
from liftbridge_sync.testing import LiftbridgeServer
from tests.integration.conftest import unique
from tests.waiting import wait_until

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from liftbridge_sync.spark import outage  # noqa: E402
from liftbridge_sync.spark.ranges import DataLossError, OffsetRange, read_wire  # noqa: E402
from liftbridge_sync.spark.readers import MISSING_STREAM_GRACE, StreamReader  # noqa: E402
from liftbridge_sync.spark.source_options import SourceOptions  # noqa: E402

# Restarts the server and races its recovery against MISSING_STREAM_GRACE: alone, after
# the parallel pass (see .ci/test-wheels), so that other workers' load never decides it.
pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(300)]

#: Reconnect quickly once the server is back (gRPC's default backoff starts at 1 s).
_FAST = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 300))


def _source(
    server: LiftbridgeServer, stream: str, *, fail_on_data_loss: bool
) -> tuple[SourceOptions, StreamReader]:
    """A streaming source of ``stream`` whose client reconnects quickly."""
    options = SourceOptions(
        client=ClientOptions(addresses=(server.address,), grpc_options=_FAST),
        stream=stream,
        fail_on_data_loss=fail_on_data_loss,
    )
    return options, StreamReader(options, StructType())


def _poll_through_restarts(
    reader: StreamReader, start: dict[str, Any], server: LiftbridgeServer, kills: tuple[bool, ...]
) -> list[Any]:
    """What ``latestOffset`` answered (or raised, which ends the polling), asked again and
    again as a query's trigger loop does, while ``server`` restarts once per ``kills``
    entry (SIGKILL when true), and once more after it is back and ready."""
    outcomes: list[Any] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                outcomes.append(reader.latestOffset(start, ReadAllAvailable()))
            except Exception as exc:  # the test reports what the source raised
                outcomes.append(exc)
                return

    poller = threading.Thread(target=poll, name="liftbridge-test-poll", daemon=True)
    poller.start()
    try:
        for kill in kills:
            server.restart(kill=kill)
        seen = len(outcomes)
        wait_until(lambda: len(outcomes) > seen or not poller.is_alive(), 60)
    finally:
        done.set()
        poller.join(60)
    assert not poller.is_alive()
    return outcomes


def test_a_stream_missing_while_its_server_restarts_is_not_data_loss() -> None:
    """A server that is starting answers "no such stream" (metadata without the stream,
    thousands of answers a restart) until it has recovered it. With failOnDataLoss the
    source asked for the next offsets then failed the query with DataLossError ("no
    longer exists"); it now looks again until the stream is back, and the offsets are
    the same before, during and after two restarts (one graceful, one SIGKILL). A stream
    really deleted is still data loss, once it stays missing for the grace period."""
    stream = unique("spark")
    with LiftbridgeServer() as server:
        with Client(server.address) as client:
            client.create_stream(stream, stream, partitions=2)
            for i in range(5):
                client.publish(stream, b"m%d" % i, partition=i % 2)
        options, reader = _source(server, stream, fail_on_data_loss=True)
        try:
            start = reader.initialOffset()
            assert start[stream] == {"0": 3, "1": 2}
            outcomes = _poll_through_restarts(reader, start, server, kills=(False, True))
            assert [o for o in outcomes if isinstance(o, Exception)] == []
            assert outcomes and all(o == start for o in outcomes)
            with Client(server.address) as client:
                client.delete_stream(stream)
            with pytest.raises(DataLossError, match="no longer exists.*stayed missing for 10 s"):
                reader.latestOffset(start, ReadAllAvailable())
        finally:
            Client.for_process(options.client).close()


def _spark_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The connector's own warnings (the client's retries warn too, on their logger)."""
    return [
        r
        for r in caplog.records
        if r.name == "liftbridge_sync.spark" and r.levelno >= logging.WARNING
    ]


def test_a_restart_is_not_told_as_a_deleted_stream_without_fail_on_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With failOnDataLoss=false a stream missing for a moment (its server restarting)
    logged a WARNING that it "no longer exists (deleted while the query reads it)";
    nothing is told now unless it stays missing for the grace period, as a stream
    really deleted does."""
    stream = unique("spark")
    with LiftbridgeServer() as server:
        with Client(server.address) as client:
            client.create_stream(stream, stream)
            client.publish(stream, b"m")
        options, reader = _source(server, stream, fail_on_data_loss=False)
        try:
            start = reader.initialOffset()
            caplog.set_level(logging.DEBUG, logger="liftbridge_sync.spark")
            outcomes = _poll_through_restarts(reader, start, server, kills=(True,))
            assert [o for o in outcomes if isinstance(o, Exception)] == []
            assert outcomes and all(o == start for o in outcomes)
            assert not _spark_warnings(caplog)
            with Client(server.address) as client:
                client.delete_stream(stream)
            began = time.monotonic()
            # Each look is a metadata call; the warning comes once the grace has passed.
            while not _spark_warnings(caplog):
                assert reader.latestOffset(start, ReadAllAvailable()) == start
                assert time.monotonic() - began < MISSING_STREAM_GRACE + 30
            assert time.monotonic() - began >= MISSING_STREAM_GRACE
            (warning,) = _spark_warnings(caplog)
            assert "no longer exists" in warning.getMessage()
            assert "failOnDataLoss=false" in warning.getMessage()
        finally:
            Client.for_process(options.client).close()


def _failing_call(which: int, real: Any, error: Exception) -> Any:
    """``real`` whose call number ``which`` (from 0) raises ``error`` (the fault)."""
    calls = [0]

    def call(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] - 1 == which:
            raise error
        return real(*args, **kwargs)

    return call


def test_a_leader_that_does_not_know_the_stream_yet_holds_the_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A partition whose high watermark is below where the query stands is checked with
    its leader (deleted and created again, or a watermark lagging after a restart). A
    leader that answered "no such partition" there (a server starting up, just after its
    metadata listed the stream) failed the query with NoSuchPartitionError; the
    partition is now held at the query's offset until the next trigger, which still
    tells a log that really went back (DataLossError)."""
    stream = unique("spark")
    with LiftbridgeServer() as server:
        with Client(server.address) as client:
            client.create_stream(stream, stream)
            for i in range(3):
                client.publish(stream, b"m%d" % i)
        options = SourceOptions(
            client=ClientOptions(addresses=(server.address,)),
            stream=stream,
            fail_on_data_loss=True,
        )
        reader = StreamReader(options, StructType())
        shared = Client.for_process(options.client)
        try:
            ahead = reader.initialOffset()
            ahead[stream] = {"0": 10}  # beyond the log's end (3): the log went back
            monkeypatch.setattr(
                shared,
                "fetch_partition_metadata",
                # Call 0 is the watermark look; call 1 asks the leader for its log's end.
                _failing_call(
                    1,
                    shared.fetch_partition_metadata,
                    NoSuchPartitionError("no such partition (starting up)"),
                ),
            )
            held = reader.latestOffset(ahead, ReadAllAvailable())
            assert held[stream] == {"0": 10}
            with pytest.raises(DataLossError, match="log now ends at offset 2, before offset 10"):
                reader.latestOffset(ahead, ReadAllAvailable())
        finally:
            shared.close()


def test_an_available_now_run_looks_again_for_a_stream_missing_at_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Trigger.AvailableNow`` fixes its end first; a stream a restarting server did not
    list yet failed the run with NoSuchStreamError at once. It is looked for again (a
    stream that stays missing still fails, after the grace period)."""
    stream = unique("spark")
    with LiftbridgeServer() as server:
        with Client(server.address) as client:
            client.create_stream(stream, stream)
            client.publish(stream, b"m")
        options = SourceOptions(client=ClientOptions(addresses=(server.address,)), stream=stream)
        reader = StreamReader(options, StructType())
        shared = Client.for_process(options.client)
        try:
            # A starting server's metadata leaves the stream out (the fault), twice.
            listed_nothing = shared.fetch_metadata(unique("absent"))
            answers = [listed_nothing, listed_nothing]
            real = shared.fetch_metadata

            def fetch_metadata(*args: Any, **kwargs: Any) -> Any:
                return answers.pop() if answers else real(*args, **kwargs)

            monkeypatch.setattr(shared, "fetch_metadata", fetch_metadata)
            reader.prepareForTriggerAvailableNow()
            assert reader.latestOffset(None, ReadAllAvailable())[stream] == {"0": 1}
        finally:
            shared.close()


def _impatient_source(server: LiftbridgeServer, stream: str, values: list[bytes]) -> SourceOptions:
    """The options of a source of a new ``stream`` holding ``values`` in partition 0,
    whose client gives up on a broker after 1 s (``liftbridge.retry.maxDelayMs=1000``)."""
    with Client(server.address) as client:
        client.create_stream(stream, stream)
        client.publish_batch(stream, values, partition=0)
    return SourceOptions(
        client=ClientOptions(
            addresses=(server.address,), grpc_options=_FAST, retry=RetryPolicy(max_delay=1.0)
        ),
        stream=stream,
    )


def test_a_query_waits_out_its_brokers_being_away(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one server stopped for longer than the client's retry policy (here 1 s, as
    ``liftbridge.retry.maxDelayMs=1000`` sets it): planning a micro-batch failed the
    query with BrokerUnavailableError. It now plans none while the brokers are away and
    goes on once they answer; away longer than the grace, it fails with the error."""
    stream = unique("spark")
    with LiftbridgeServer() as server:
        options = _impatient_source(server, stream, [b"a", b"b"])
        reader = StreamReader(options, StructType())
        try:
            start = reader.initialOffset()
            assert start[stream] == {"0": 2}
            server.stop()
            with caplog.at_level(logging.WARNING, logger="liftbridge_sync.spark"):
                away = [reader.latestOffset(start, ReadAllAvailable()) for _ in range(3)]
                assert away == [start] * 3  # no micro-batch, no failure: about 3 s away
                server.start()
                with Client(server.address) as client:
                    client.publish(stream, b"c", partition=0, ack_policy=AckPolicy.ALL)
                ended = wait_until_answered(reader, start)
            assert ended[stream] == {"0": 3}
            said = [r.getMessage() for r in _spark_warnings(caplog)]
            assert any("no broker answered" in m for m in said), said
            assert any("answer again" in m for m in said), said
            monkeypatch.setattr(outage, "OUTAGE_GRACE", 2.0)
            server.stop()
            with pytest.raises(BrokerUnavailableError, match="no broker answered for"):
                for _ in range(10):  # each try takes the retry policy's 1 s
                    reader.latestOffset(ended, ReadAllAvailable())
        finally:
            Client.for_process(options.client).close()


def wait_until_answered(reader: StreamReader, start: dict[str, Any]) -> dict[str, Any]:
    """``latestOffset`` asked again, as the trigger loop asks, until it moves past
    ``start`` (the brokers answered and the new message is committed)."""
    moved: list[dict[str, Any]] = []

    def past_start() -> bool:
        moved.append(reader.latestOffset(start, ReadAllAvailable()))
        return moved[-1] != start

    wait_until(past_start, 60, "the source to see the new message")
    return moved[-1]


def test_a_read_task_waits_out_its_brokers_being_away(caplog: pytest.LogCaptureFixture) -> None:
    """A read task opening its subscription while every broker was away failed once the
    client's retry policy gave up (here 1 s): in a query, the task and the query with
    it. It now subscribes again until a broker answers (within the grace; a restarted
    server's "no such stream" while it recovers counts as the outage) and reads its
    range whole."""
    stream = unique("spark")
    with LiftbridgeServer() as server:
        options = _impatient_source(server, stream, [b"a", b"b", b"c"])
        read: list[Any] = []
        reader = threading.Thread(
            target=lambda: read.append(
                [m.offset for run in read_wire(options, OffsetRange(stream, 0, 0, 3)) for m in run]
            ),
            name="liftbridge-test-read-task",
        )
        try:
            server.stop()
            with caplog.at_level(logging.WARNING, logger="liftbridge_sync.spark"):
                reader.start()
                wait_until(
                    lambda: any("read task waits" in r.getMessage() for r in caplog.records),
                    30,
                    "the read task to find the brokers away",
                )
                server.start()
                # A restarted v1.9.0 leader serves nothing past the high watermark it
                # recovered until the partition commits a new message (see the README).
                with Client(server.address) as client:
                    client.publish(stream, b"d", partition=0, ack_policy=AckPolicy.ALL)
                reader.join(60)
            assert not reader.is_alive()
            assert read == [[0, 1, 2]]
            said = [r.getMessage() for r in _spark_warnings(caplog)]
            assert any("answer again" in m for m in said), said
        finally:
            Client.for_process(options.client).close()
