"""Observable instruments: every client of a meter provider reports its own series.

The real SDK with an in-memory reader; no server: a publish to a closed port fails at
once, and the client's telemetry is set up by it all the same.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

from liftbridge_sync import (  # noqa: E402
    ArgumentTypeError,
    BrokerUnavailableError,
    Client,
    RetryPolicy,
)

OBSERVED = (
    "messaging.liftbridge.publish.in_flight",
    "messaging.liftbridge.publish.resent",
    "messaging.liftbridge.publish.connects",
)


@pytest.fixture
def metrics() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    provider.shutdown()


def _publishing_client(provider: MeterProvider) -> Client:
    client = Client(["127.0.0.1:1"], meter_provider=provider, retry=RetryPolicy.no_retry())
    error = client.publish_async("s", b"x", partition=0).exception(10)
    assert isinstance(error, BrokerUnavailableError)
    return client


def _clients(reader: InMemoryMetricReader) -> dict[str, set[str]]:
    """Each observable instrument's ``messaging.client.id`` values this collection."""
    found: dict[str, set[str]] = {name: set() for name in OBSERVED}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name in found:
                    found[metric.name] |= {
                        str((point.attributes or {})["messaging.client.id"])
                        for point in metric.data.data_points
                    }
    return found


def test_two_clients_of_one_provider_report_two_series_until_closed(
    metrics: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    provider, reader = metrics
    first = _publishing_client(provider)
    (first_id,) = _clients(reader)[OBSERVED[0]]
    second = _publishing_client(provider)
    both = _clients(reader)
    # The SDK handed the second client the first one's instruments, and dropped its
    # callbacks: it was never reported.
    assert all(len(ids) == 2 and first_id in ids for ids in both.values()), both
    (second_id,) = both[OBSERVED[0]] - {first_id}

    first.close()
    assert _clients(reader) == {name: {second_id} for name in OBSERVED}
    second.close()
    assert _clients(reader) == {name: set() for name in OBSERVED}


def test_a_client_dropped_without_close_stops_reporting(
    metrics: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    provider, reader = metrics
    kept = _publishing_client(provider)
    (kept_id,) = _clients(reader)[OBSERVED[0]]
    dropped = _publishing_client(provider)
    assert len(_clients(reader)[OBSERVED[0]]) == 2
    # Its parts with threads, closed below: only the client itself is let go.
    core, publisher = dropped._core, dropped._publisher
    assert publisher is not None
    with pytest.warns(ResourceWarning, match="unclosed"):
        del dropped
        gc.collect()
    try:
        assert _clients(reader)[OBSERVED[0]] == {kept_id}
    finally:
        publisher.close(timeout=0)
        core.close(0)
        kept.close()


FORKED = textwrap.dedent(
    """
    import faulthandler, os, sys
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from liftbridge_sync import Client, RetryPolicy

    def publishing_client():
        client = Client(["127.0.0.1:1"], meter_provider=provider, retry=RetryPolicy.no_retry())
        client.publish_async("s", b"x", partition=0).exception(10)
        return client

    def client_ids():
        data = reader.get_metrics_data()
        return {
            str(point.attributes["messaging.client.id"])
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "messaging.liftbridge.publish.connects"
            for point in metric.data.data_points
        }

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    master = publishing_client()  # gunicorn --preload: the master published once
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(15, exit=True)
        worker = publishing_client()
        ids = client_ids()
        print(sorted(ids), flush=True)
        ok = len(ids) == 1 and next(iter(ids)).startswith(f"{os.getpid()}-")
        worker.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    master.close()
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_forked_worker_reports_its_own_client_not_the_masters() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


FORKED_WHILE_MEASURING = textwrap.dedent(
    """
    import faulthandler, os, sys, threading, time
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics._internal import instrument
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from liftbridge_sync import Client, RetryPolicy

    # A measurement held half-way, as a preempted thread holds one: the SDK's lock of
    # the instrument's aggregations stands for itself here (held across the fork, it
    # stays held in the child for good).
    sdk_lock = threading.Lock()
    inside = threading.Event()
    real_record = instrument.Histogram.record

    def slow_record(self, *args, **kwargs):
        with sdk_lock:
            inside.set()
            time.sleep(0.5)  # the measurement's own (slow) work, not a synchronisation
            return real_record(self, *args, **kwargs)

    instrument.Histogram.record = slow_record
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def failing_publish():
        client = Client(["127.0.0.1:1"], meter_provider=provider, retry=RetryPolicy.no_retry())
        client.publish_async("s", b"x", partition=0).exception(10)
        return client

    master = Client(["127.0.0.1:1"], meter_provider=provider, retry=RetryPolicy.no_retry())
    master.publish_async("s", b"x", partition=0)  # its outcome is recorded on its thread
    assert inside.wait(10)
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(10, exit=True)
        worker = failing_publish()  # records a measurement too
        worker.close()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    master.close()
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


def test_a_fork_waits_for_a_measurement_under_way() -> None:
    """A fork while the client's thread was recording a measurement left the SDK's lock
    held in the child, whose first measurement of that instrument then waited for ever
    (a ``gunicorn --preload`` worker hung on its first publish)."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED_WHILE_MEASURING], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("argument", "given"),
    [("meter_provider", "meters"), ("tracer_provider", 5), ("meter_provider", MeterProvider)],
)
def test_a_provider_that_is_no_provider_is_refused_when_the_client_is_made(
    argument: str, given: object
) -> None:
    # It was taken as given, and the first publish (every publish after it too, the
    # telemetry never made) raised a bare AttributeError ('str' object has no attribute
    # 'get_meter') from inside the library.
    with pytest.raises(ArgumentTypeError, match=argument):
        Client(["127.0.0.1:1"], **{argument: given})  # type: ignore[arg-type]


def test_a_fork_waits_for_a_stuck_measurement_no_longer_than_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every blocking wait has a bound: a measurement that does not end (a thread stuck
    inside the SDK) holds the fork up for ``FORK_WAIT`` only, and the child then
    measures under a lock of its own (the parent's thread that holds the old one is
    not in the child)."""
    from liftbridge_sync.otel import _forking

    monkeypatch.setattr(_forking, "FORK_WAIT", 0.05)
    stuck = _forking.measuring()
    monkeypatch.setattr(_forking, "_lock", stuck)  # restored after the test
    assert stuck.acquire(timeout=1)  # the stuck measurement
    try:
        _forking._before_fork()
        assert not _forking._taken_for_fork
        _forking._after_fork_in_child()  # as in the child
        fresh = _forking.measuring()
        assert fresh is not stuck and not fresh.locked()
    finally:
        stuck.release()
