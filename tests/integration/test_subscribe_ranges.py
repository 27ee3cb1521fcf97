"""Stop positions and empty ranges on compacted and retention-truncated streams.

A stop position means "the last offset at or before N": on a compacted stream the stop
offset may be gone, on a truncated one everything up to it may be. The streams here run
a fast cleaner on small segments, on a server of this module's own (the churn test on one
of its own): v1.9.0 crashed deleting a compacted stream while its cleaner ran, so these
streams are never deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from liftbridge_sync import Client, Message, StartAt, StopAt
from liftbridge_sync.testing import LiftbridgeServer
from tests.waiting import wait_until

from ._pubdata import Record, publish, publish_values
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.serial]

#: Messages per partition of the compacted stream; odd offsets reuse 10 keys.
COUNT = 300
#: How long a compacted log must stay unchanged to count as compacted (seconds).
STILL_FOR = 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[LiftbridgeServer]:
    with LiftbridgeServer() as running:
        yield running


#: ``rpc_timeout`` of the clients here: how long a committed range may stay silent.
SILENCE = 1.5


@pytest.fixture(params=["h2", "grpc"])
def client(request: pytest.FixtureRequest, server: LiftbridgeServer) -> Iterator[Client]:
    with Client(server.address, subscribe_transport=request.param, rpc_timeout=SILENCE) as made:
        yield made


def keyed(count: int, prefix: str = "") -> list[Record]:
    """Half the keys repeated: odd offsets cycle through 10 keys, even ones are unique."""
    return [
        Record(b"x" * 20, key=f"{prefix}r{i % 10}".encode() if i % 2 else f"{prefix}u{i}".encode())
        for i in range(count)
    ]


def read_all(client: Client, stream: str, partition: int = 0) -> list[Message]:
    sub = client.subscribe(
        stream, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
    )
    return list(sub)


def offsets(messages: list[Message]) -> list[int]:
    return [m.offset for m in messages]


@pytest.fixture(scope="module")
def compacted(server: LiftbridgeServer) -> tuple[str, dict[int, list[Message]]]:
    """A 2-partition compacted stream whose cleaner has removed offsets, and what is left
    of each partition (read once the log stopped changing)."""
    name = unique("compacted")
    with Client(server.address) as client:
        client.create_stream(
            name,
            name,
            partitions=2,
            compact_enabled=True,
            segment_max_bytes=1024,
            cleaner_interval=0.2,
        )
        for partition in (0, 1):
            publish(server.address, name, keyed(COUNT), partition=partition)
        left: dict[int, list[Message]] = {}
        changed_at = [time.monotonic()]

        def settled() -> bool:
            # Two reads alike said little: on a loaded machine the cleaner (every 0.2 s)
            # may not run between them, and a log it had compacted in part (later
            # segments not yet) was taken as final, then lost offsets under the tests.
            # The log must stay the same for STILL_FOR (ten cleaner intervals).
            now = {p: read_all(client, name, p) for p in (0, 1)}
            if any(len(m) == COUNT for m in now.values()) or any(
                offsets(now[p]) != offsets(left.get(p, [])) for p in (0, 1)
            ):
                left.update(now)
                changed_at[0] = time.monotonic()
                return False
            return time.monotonic() - changed_at[0] >= STILL_FOR

        wait_until(settled, timeout=60, what="compaction to remove offsets and stop")
    return name, left


def expected(left: list[Message], first: int, last: int) -> list[int]:
    return [m.offset for m in left if first <= m.offset <= last]


def test_compaction_removed_offsets(compacted: tuple[str, dict[int, list[Message]]]) -> None:
    _, left = compacted
    for messages in left.values():
        present = offsets(messages)
        assert present == sorted(set(present))
        assert present[-1] == COUNT - 1  # the newest message always survives
        assert len(present) < COUNT


def test_stop_offset_on_a_compacted_stream(
    client: Client, compacted: tuple[str, dict[int, list[Message]]]
) -> None:
    name, left = compacted
    present = set(offsets(left[0]))
    missing = sorted(set(range(COUNT)) - present)
    # A removed stop offset (the case that never ended), a present one, the newest.
    for stop in (missing[3], missing[-1], min(present - {0} - {1}), COUNT - 1):
        started = time.monotonic()
        sub = client.subscribe(name, start=StartAt.offset(1), stop=StopAt.offset(stop))
        got = offsets(list(sub))
        assert got == expected(left[0], 1, stop), stop
        assert time.monotonic() - started < 10
    # From a removed start offset to a removed stop offset.
    sub = client.subscribe(name, start=StartAt.offset(missing[0]), stop=StopAt.offset(missing[4]))
    assert offsets(list(sub)) == expected(left[0], missing[0], missing[4])


def test_stop_latest_and_timestamp_on_a_compacted_stream(
    client: Client, compacted: tuple[str, dict[int, list[Message]]]
) -> None:
    name, left = compacted
    assert offsets(read_all(client, name)) == offsets(left[0])
    middle = left[0][len(left[0]) // 2]
    sub = client.subscribe(
        name, start=StartAt.earliest(), stop=StopAt.timestamp(middle.timestamp_ns)
    )
    got = list(sub)
    assert got[-1].offset == middle.offset
    assert all(m.timestamp_ns <= middle.timestamp_ns for m in got)
    assert offsets(got) == [m.offset for m in left[0] if m.timestamp_ns <= middle.timestamp_ns]


def test_whole_stream_stop_on_a_compacted_stream(
    client: Client, compacted: tuple[str, dict[int, list[Message]]]
) -> None:
    name, left = compacted
    missing = sorted(set(range(COUNT)) - set(offsets(left[1])))
    stop = missing[len(missing) // 2]
    with client.subscribe_stream(name, start=StartAt.earliest(), stop=StopAt.offset(stop)) as sub:
        got = list(sub)
        assert sub.exhausted  # the stop offset compacted away still ends each partition
    for partition in (0, 1):
        mine = [m.offset for m in got if m.partition == partition]
        assert mine == expected(left[partition], 0, stop)


#: Fresh servers the churn test may use: v1.9.0 sometimes dies under this cleaner load (a
#: Go panic in its segment handling, not a refusal), which says nothing of the client.
CHURN_SERVERS = 3


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_reads_while_the_cleaner_swaps_segments_never_fail(
    transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A busy compacted stream: the reader meets segments the cleaner is closing ("segment
    has been closed"). Every read finishes with what it asked for.

    On a server of its own, so that a crash of v1.9.0 under this load takes no other
    test's server down. A run whose server died is started again on a fresh server (the
    crash is logged with the server's own words); a failure of a run whose server kept
    running fails the test at once, and so do as many crashes in a row.
    """
    crashes: list[str] = []
    while len(crashes) < CHURN_SERVERS:
        caplog.clear()
        with LiftbridgeServer() as server:
            try:
                with Client(
                    server.address, subscribe_transport=transport, rpc_timeout=SILENCE
                ) as client:
                    _read_while_churning(server, client, caplog)
                return
            except Exception:
                if not server.exited:
                    raise
                crashes.append(server.crash_reason() or server.log_tail(5))
                logging.getLogger(__name__).warning(
                    "the churn test's server died (%s); again on a fresh one", crashes[-1]
                )
    pytest.fail(f"the server died in all {CHURN_SERVERS} runs: {crashes}")


def _read_while_churning(
    server: LiftbridgeServer, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique("churn")
    client.create_stream(
        name, name, compact_enabled=True, segment_max_bytes=1024, cleaner_interval=0.1
    )
    publish(server.address, name, keyed(200))
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        rounds = 0
        while not stop.is_set():
            try:
                publish(server.address, name, keyed(20, prefix=f"{rounds % 3}-"))
            except BaseException as exc:  # reported by the test
                errors.append(exc)
                return
            rounds += 1
            # Pacing, not synchronisation: a log that grows without bound keeps v1.9.0's
            # cleaner rewriting it all the time, and the refusal would never clear.
            stop.wait(0.05)

    publisher = threading.Thread(target=churn, name="liftbridge-test-churn", daemon=True)
    publisher.start()
    caplog.set_level(logging.WARNING, logger="liftbridge_sync")
    reads = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (reads < 30 or not _refusals(caplog)):
            newest = client.fetch_partition_metadata(name, 0).newest_offset
            first = reads * 7 % 150
            sub = client.subscribe(name, start=StartAt.offset(first), stop=StopAt.offset(newest))
            got = offsets(list(sub))
            # Later rounds reuse every key, so even the stop offset may be gone by now.
            assert got == sorted(set(got)) and got[0] >= first and got[-1] <= newest
            reads += 1
    finally:
        stop.set()
        publisher.join(30)
    assert not errors
    assert _refusals(caplog), f"no segment refusal met in {reads} reads"


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "segment" in r.getMessage()]


# ---------------------------------------------------------------------- retention


@pytest.fixture(scope="module")
def truncated(server: LiftbridgeServer) -> str:
    """A stream whose retention deleted offsets 0-50 and more, then got offsets 200-204."""
    name = unique("truncated")
    with Client(server.address, rpc_timeout=SILENCE) as client:
        client.create_stream(
            name, name, retention_max_messages=20, segment_max_bytes=512, cleaner_interval=0.2
        )
        publish_values(server.address, name, 200)

        def truncated_past_50() -> bool:
            sub = client.subscribe(name, start=StartAt.offset(0), stop=StopAt.offset(50))
            return list(sub) == []

        wait_until(truncated_past_50, timeout=30, what="retention to delete old segments")
        publish_values(server.address, name, 5, start=200)
    return name


def test_stop_offset_that_fell_to_retention_is_an_empty_range(
    client: Client, truncated: str
) -> None:
    for start in (StartAt.offset(1), StartAt.earliest()):
        assert list(client.subscribe(truncated, start=start, stop=StopAt.offset(10))) == []


def test_stop_offset_across_the_retention_boundary(client: Client, truncated: str) -> None:
    sub = client.subscribe(truncated, start=StartAt.offset(1), stop=StopAt.offset(204))
    got = offsets(list(sub))
    assert got == list(range(got[0], 205))
    assert got[0] > 50


def test_reads_of_a_log_retention_emptied_end(server: LiftbridgeServer, client: Client) -> None:
    """Every message deleted (1-byte segments: the active one is always empty): v1.9.0
    then waits for the next publish even for committed offsets. Stop-bounded reads end
    once the committed range stayed silent for ``rpc_timeout``."""
    name = unique("emptied")
    client.create_stream(
        name, name, retention_max_age=1.0, segment_max_bytes=1, cleaner_interval=0.2
    )
    publish_values(server.address, name, 20)
    wait_until(
        lambda: offsets(read_all(client, name)) == [], timeout=30, what="retention to empty it"
    )
    for start, stop in [
        (StartAt.earliest(), StopAt.latest()),
        (StartAt.offset(3), StopAt.offset(10)),
        (StartAt.earliest(), StopAt.timestamp(time.time_ns())),
    ]:
        started = time.monotonic()
        assert list(client.subscribe(name, start=start, stop=stop)) == []
        assert time.monotonic() - started < SILENCE + 5
    with client.subscribe_stream(name, start=StartAt.earliest(), stop=StopAt.latest()) as whole:
        assert list(whole) == []
    # Polled with short gets, the waits add up to the silence that ends the read.
    polled = client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest())
    started = time.monotonic()
    polls = 0
    with pytest.raises(StopIteration):
        while time.monotonic() - started < SILENCE + 5:
            try:
                polled.get(0.1)
            except TimeoutError:
                polls += 1
    assert polls >= SILENCE / 0.1 - 1 and polled.exhausted


def test_a_range_read_after_the_caller_was_away_gets_the_whole_range(
    server: LiftbridgeServer, client: Client
) -> None:
    """A get() that timed out, then a pause longer than rpc_timeout (the caller busy
    with other work) while the range was published: the h2 read counted the pause as
    the server's silence, cancelled the call at once, dropping what the socket held,
    and ended the range short, blaming retention (4 reads of 15 in a probe)."""
    for _ in range(3):
        name = unique("away")
        client.create_stream(name, name)
        sub = client.subscribe(name, start=StartAt.earliest(), stop=StopAt.offset(9))
        with pytest.raises(TimeoutError):
            sub.get(0.05)
        publish_values(server.address, name, 10)
        time.sleep(SILENCE + 0.3)  # the scenario: the caller away past rpc_timeout
        assert offsets(list(sub)) == list(range(10))


# ---------------------------------------------------------------------- empty ranges


def test_starts_past_the_end_with_a_stop_are_empty(
    server: LiftbridgeServer, client: Client
) -> None:
    name = unique("past")
    client.create_stream(name, name)
    publish_values(server.address, name, 100)
    newest = read_all(client, name)[-1]
    later = newest.timestamp_ns + 1
    for start, stop in [
        (StartAt.timestamp(later), StopAt.latest()),
        (StartAt.timestamp(later), StopAt.offset(99)),
        (StartAt.timestamp(later), StopAt.timestamp(later + 10**9)),
        (StartAt.latest(), StopAt.offset(98)),
        (StartAt.new_only(), StopAt.latest()),
        (StartAt.offset(100), StopAt.latest()),
        (StartAt.offset(100), StopAt.offset(99)),
        (StartAt.offset(50), StopAt.offset(10)),
        (StartAt.earliest(), StopAt.timestamp(newest.timestamp_ns - 10**12)),
    ]:
        with client.subscribe(name, start=start, stop=stop) as sub:
            with pytest.raises(StopIteration):
                sub.get(5)
    with client.subscribe_stream(name, start=StartAt.new_only(), stop=StopAt.latest()) as whole:
        assert list(whole) == []
    client.delete_stream(name)


def _from_time(client: Client, stream: str, since: int, partition: int = 0) -> list[int]:
    """Offsets read from Unix ns ``since`` up to the newest message."""
    sub = client.subscribe(
        stream, partition=partition, start=StartAt.timestamp(since), stop=StopAt.latest()
    )
    return offsets(list(sub))


def test_a_start_time_finds_its_first_message_in_every_segment(client: Client) -> None:
    """v1.9.0 answers a time that falls just before the first message of the last
    segment with the log's end, skipping that whole segment; the client reads the same
    times right (small segments: a few messages each)."""
    name = unique("times")
    client.create_stream(name, name, segment_max_bytes=200)
    for i in range(12):
        client.publish(name, b"%d" % i)
    messages = read_all(client, name)
    assert offsets(messages) == list(range(12))
    stamps = [m.timestamp_ns for m in messages]
    for k in range(12):
        # Just after the message before: the first message at or after it is k's.
        since = stamps[k - 1] + 1 if k else stamps[0]
        first = next(i for i, stamp in enumerate(stamps) if stamp >= since)
        assert _from_time(client, name, since) == list(range(first, 12)), (k, stamps)
    # Past the newest message: nothing until the next one comes.
    with client.subscribe(name, start=StartAt.timestamp(stamps[-1] + 1)) as sub:
        # Pinned after the newest committed message; anything written before the time
        # but committed only later is judged by its stamp.
        assert sub._target.start_offset == 12
        assert sub._target.start_timestamp_ns == stamps[-1] + 1
        with pytest.raises(TimeoutError):
            sub.get(0.2)
        client.publish(name, b"later")
        assert sub.get(10).offset == 12


def test_a_start_time_on_a_compacted_stream(
    client: Client, compacted: tuple[str, dict[int, list[Message]]]
) -> None:
    name, left = compacted
    messages = left[1]
    for j in range(1, len(messages), max(1, len(messages) // 9)):
        since = messages[j - 1].timestamp_ns + 1
        want = [m.offset for m in messages if m.timestamp_ns >= since]
        assert _from_time(client, name, since, partition=1) == want, j
