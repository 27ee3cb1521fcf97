"""A streaming source's server restarting under it (the source's calls, no Spark job)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from liftbridge_sync import Client
from liftbridge_sync.options import ClientOptions
from liftbridge_sync.testing import LiftbridgeServer
from tests.integration.conftest import unique
from tests.waiting import wait_until

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from liftbridge_sync.spark.ranges import DataLossError  # noqa: E402
from liftbridge_sync.spark.readers import StreamReader  # noqa: E402
from liftbridge_sync.spark.source_options import SourceOptions  # noqa: E402

# Restarts the server and races its recovery against MISSING_STREAM_GRACE: alone, after
# the parallel pass (see .ci/test-wheels), so that other workers' load never decides it.
pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(300)]

#: Reconnect quickly once the server is back (gRPC's default backoff starts at 1 s).
_FAST = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 300))


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
        options = SourceOptions(
            client=ClientOptions(addresses=(server.address,), grpc_options=_FAST),
            stream=stream,
            fail_on_data_loss=True,
        )
        reader = StreamReader(options, StructType())
        try:
            start = reader.initialOffset()
            assert start[stream] == {"0": 3, "1": 2}
            outcomes: list[Any] = []
            done = threading.Event()

            def poll() -> None:
                # The query's trigger loop: the next offsets, again and again.
                while not done.is_set():
                    try:
                        outcomes.append(reader.latestOffset(start, ReadAllAvailable()))
                    except Exception as exc:  # the test reports what the source raised
                        outcomes.append(exc)
                        return

            poller = threading.Thread(target=poll, name="liftbridge-test-poll", daemon=True)
            poller.start()
            try:
                for kill in (False, True):
                    server.restart(kill=kill)
                # And one answer more once the server is back and ready.
                seen = len(outcomes)
                wait_until(lambda: len(outcomes) > seen or not poller.is_alive(), 60)
            finally:
                done.set()
                poller.join(60)
            assert not poller.is_alive()
            errors = [o for o in outcomes if isinstance(o, Exception)]
            assert errors == []
            assert outcomes and all(o == start for o in outcomes)
            with Client(server.address) as client:
                client.delete_stream(stream)
            with pytest.raises(DataLossError, match="no longer exists.*stayed missing for 10 s"):
                reader.latestOffset(start, ReadAllAvailable())
        finally:
            Client.for_process(options.client).close()
