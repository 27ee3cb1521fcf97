"""Key and round-robin partitioners (client-landscape.md §6, liftbridge-api.md §6)."""

from __future__ import annotations

import collections
import pickle
import sys
import threading
import zlib
from collections.abc import Iterator

import pytest

from liftbridge_sync.errors import ConfigurationError
from liftbridge_sync.partitioners import ROUND_ROBIN_STREAMS, ByKey, Partitioner, RoundRobin


@pytest.mark.parametrize(
    ("key", "count", "expected"),
    [
        (b"a", 10, 7),  # liftbridge-api.md §6: unsigned CRC, not -9
        (b"", 10, 0),
        (None, 10, 0),
        (b"foo", 3, 2),
        (b"foo", 7, 2),
        (b"hello", 16, 6),
        (b"\x00", 5, 2),
        (b"key-1", 4, 2),
        (b"anything", 1, 0),
    ],
)
def test_by_key_vectors(key: bytes | None, count: int, expected: int) -> None:
    assert ByKey().partition("s", key, b"v", count) == expected


@pytest.mark.parametrize("key", [b"a", b"foo", b"\x00"])
def test_by_key_is_unsigned(key: bytes) -> None:
    crc = zlib.crc32(key)
    assert crc >= 2**31  # top bit set: a signed int32 would be negative
    for count in (3, 5, 7, 10, 16):
        result = ByKey().partition("s", key, b"", count)
        assert result == crc % count
        assert 0 <= result < count


def test_by_key_ignores_stream_and_value() -> None:
    by_key = ByKey()
    assert {by_key.partition(s, b"k", v, 13) for s in ("a", "b") for v in (b"", b"x")} == {
        zlib.crc32(b"k") % 13
    }


def test_by_key_accepts_bytearray_and_memoryview() -> None:
    assert ByKey().partition("s", bytearray(b"a"), b"", 10) == 7  # type: ignore[arg-type]
    assert ByKey().partition("s", memoryview(b"a"), b"", 10) == 7  # type: ignore[arg-type]


def test_round_robin_cycles_from_zero() -> None:
    rr = RoundRobin()
    assert [rr.partition("s", None, b"", 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_round_robin_streams_are_independent() -> None:
    rr = RoundRobin()
    got = [(s, rr.partition(s, b"k", b"", 4)) for s in ["a", "a", "b", "a", "c", "b"]]
    assert got == [("a", 0), ("a", 1), ("b", 0), ("a", 2), ("c", 0), ("b", 1)]


def test_round_robin_ignores_key() -> None:
    rr = RoundRobin()
    assert [rr.partition("s", b"same", b"", 2) for _ in range(4)] == [0, 1, 0, 1]


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Make the interpreter switch threads very often, so that races show up."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@pytest.mark.usefixtures("fast_switching")
def test_round_robin_is_thread_safe() -> None:
    rr = RoundRobin()
    threads_n, calls, partitions = 16, 2000, 7
    barrier = threading.Barrier(threads_n)
    results: list[collections.Counter[int]] = []
    lock = threading.Lock()

    def work() -> None:
        counts: collections.Counter[int] = collections.Counter()
        barrier.wait()
        for _ in range(calls):
            counts[rr.partition("s", None, b"", partitions)] += 1
        with lock:
            results.append(counts)

    threads = [threading.Thread(target=work) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total: collections.Counter[int] = sum(results, collections.Counter())
    n = threads_n * calls  # 32000 = 4571 * 7 + 3
    expected = {p: n // partitions + (1 if p < n % partitions else 0) for p in range(partitions)}
    assert dict(total) == expected
    # The counter advanced exactly once per call.
    assert rr.partition("s", None, b"", n + 1) == n


@pytest.mark.parametrize("partitioner", [ByKey(), RoundRobin()])
@pytest.mark.parametrize("count", [0, -1])
def test_partition_count_validated(partitioner: Partitioner, count: int) -> None:
    with pytest.raises(ConfigurationError, match="partition_count must be >= 1"):
        partitioner.partition("s", b"k", b"v", count)


def test_protocol() -> None:
    assert isinstance(ByKey(), Partitioner)
    assert isinstance(RoundRobin(), Partitioner)

    class Fixed:
        def partition(
            self, stream: str, key: bytes | None, value: bytes, partition_count: int
        ) -> int:
            return 0

    assert isinstance(Fixed(), Partitioner)
    assert not isinstance(object(), Partitioner)


def test_pickle_and_repr() -> None:
    by_key = pickle.loads(pickle.dumps(ByKey()))
    assert by_key == ByKey()
    assert hash(by_key) == hash(ByKey())
    assert by_key != RoundRobin()
    assert repr(by_key) == "ByKey()"
    rr = RoundRobin()
    rr.partition("s", None, b"", 5)
    rr.partition("s", None, b"", 5)
    copy = pickle.loads(pickle.dumps(rr))
    assert isinstance(copy, RoundRobin)
    assert repr(copy) == "RoundRobin()"
    assert copy.partition("s", None, b"", 5) == 0  # fresh counters
    assert rr.partition("s", None, b"", 5) == 2  # original unaffected


def test_by_key_is_immutable() -> None:
    with pytest.raises(AttributeError):
        ByKey().x = 1  # type: ignore[attr-defined]


def test_named_partitioners_take_both_spellings_of_round_robin() -> None:
    """The CLI said ``round-robin`` and the Spark sink ``roundrobin``: both take both."""
    from click.testing import CliRunner

    from liftbridge_sync.cli import publish as _registers_publish  # noqa: F401
    from liftbridge_sync.cli.app import cli
    from liftbridge_sync.partitioners import partitioner_named
    from liftbridge_sync.spark.sink import SinkOptions

    assert isinstance(partitioner_named("key"), ByKey)
    for name in ("round-robin", "roundrobin"):
        first, second = partitioner_named(name), partitioner_named(name)
        assert isinstance(first, RoundRobin) and first is not second
        assert SinkOptions.from_strings({"brokers": "a:1", "partitioner": name}).partitioner
    for bad in ("hash", "Key", "", None, 1):
        with pytest.raises(ConfigurationError, match="no partitioner is named"):
            partitioner_named(bad)  # type: ignore[arg-type]
    usage = CliRunner().invoke(cli, ["publish", "--help"]).output
    assert "key|round-robin|roundrobin" in usage


def test_round_robin_keeps_counters_of_recent_streams_only() -> None:
    # One RoundRobin shared by a process that publishes to uniquely named streams kept a
    # counter for every stream it ever placed a message of: memory grew for good.
    rr = RoundRobin()
    hot = [rr.partition("hot", None, b"", 3)]
    for i in range(20_000):
        rr.partition(f"once-{i}", None, b"", 3)
        if i % 1000 == 0:
            hot.append(rr.partition("hot", None, b"", 3))
    assert len(rr._counters) <= ROUND_ROBIN_STREAMS
    # A stream in use keeps its place in the cycle however many others come and go.
    assert hot == [i % 3 for i in range(len(hot))]
