"""Publishers that keep publishing through a fault, and reading back what was stored.

Shared by the restart tests (``test_publish_restarts.py``, ``test_publish_sigint.py``,
``test_rolling_restart.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future

from liftbridge_sync import Ack, AckPolicy, Client, Message, StartAt, StopAt

from ._rewrites import Where

__all__ = ["Publishers", "Subscribers", "read_back"]


class Publishers:
    """Two publishing threads until :attr:`stop` is set, and what they saw: pipelined
    ack-ALL ``publish_async`` calls (values ``a<n>``) and ``publish()`` calls (``s<n>``),
    round robin over the partitions. Thread-safe counters; a context manager."""

    def __init__(self, client: Client, stream: str, partitions: int) -> None:
        self.client = client
        self.stream = stream
        self.partitions = partitions
        self.stop = threading.Event()
        self.futures: list[Future[Ack | None]] = []
        self.sync_acks: list[tuple[bytes, Ack | None]] = []
        self.sync_errors: list[BaseException] = []
        self.done_at: list[float] = []
        #: The longest ``publish()`` call, seconds.
        self.longest_publish = 0.0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._pipelined, name="lbtest-pipelined", daemon=True),
            threading.Thread(target=self._one_at_a_time, name="lbtest-sync", daemon=True),
        ]

    def __enter__(self) -> Publishers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)

    def _record(self, _: object) -> None:
        with self._lock:
            self.done_at.append(time.monotonic())

    def _pipelined(self) -> None:
        i = 0
        while not self.stop.is_set():
            future = self.client.publish_async(
                self.stream, b"a%d" % i, partition=i % self.partitions, ack_policy=AckPolicy.ALL
            )
            future.add_done_callback(self._record)
            self.futures.append(future)
            i += 1

    def _one_at_a_time(self) -> None:
        i = 0
        while not self.stop.is_set():
            value = b"s%d" % i
            began = time.monotonic()
            try:
                ack = self.client.publish(
                    self.stream, value, partition=i % self.partitions, ack_policy=AckPolicy.ALL
                )
            except Exception as exc:
                self.sync_errors.append(exc)
            else:
                self.sync_acks.append((value, ack))
                self._record(None)
            finally:
                self.longest_publish = max(self.longest_publish, time.monotonic() - began)
            i += 1

    def acks_of(self, values: Iterable[bytes]) -> dict[bytes, Ack | None]:
        """The ack of each of ``values`` (acknowledged ones, published by these threads)."""
        sync = dict(self.sync_acks)
        acks: dict[bytes, Ack | None] = {}
        for value in values:
            if value.startswith(b"a"):
                acks[value] = self.futures[int(value[1:])].result(timeout=0)
            else:
                acks[value] = sync[value]
        return acks

    def longest_stall(self) -> float:
        with self._lock:
            times = sorted(self.done_at)
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def read_back(
    client: Client,
    stream: str,
    partitions: int,
    offsets: dict[int, list[int]] | None = None,
    log: dict[Where, Message] | None = None,
) -> list[bytes]:
    """Every value stored in ``stream``, checking each partition's offsets increase
    (and putting them in ``offsets`` by partition, and the messages in ``log`` by
    partition and offset, when given)."""
    values: list[bytes] = []
    for partition in range(partitions):
        seen: list[int] = []
        with client.subscribe(
            stream, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
        ) as sub:
            for message in sub:
                seen.append(message.offset)
                values.append(message.value)
                if log is not None:
                    log[(partition, message.offset)] = message
        assert seen == sorted(set(seen)), f"partition {partition}: offsets out of order"
        if offsets is not None:
            offsets[partition] = seen
    return values


class Subscribers:
    """A thread per partition reading it from the start while the fault happens, until
    it has read up to the offsets given to :meth:`finish`. A context manager."""

    def __init__(self, client: Client, stream: str, partitions: int) -> None:
        self.offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
        #: When each partition's messages arrived (``time.monotonic()``).
        self.arrived_at: dict[int, list[float]] = {p: [] for p in range(partitions)}
        #: The longest ``get(timeout=0.2)`` call, seconds.
        self.longest_get = 0.0
        self.errors: list[BaseException] = []
        self._client = client
        self._stream = stream
        self._until: dict[int, int] | None = None
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._read, args=(p,), name="lbtest-sub", daemon=True)
            for p in range(partitions)
        ]

    def __enter__(self) -> Subscribers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def finish(self, last: dict[int, int], timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until each partition was read up to its
        ``last`` offset, then stop reading."""
        self._until = last
        for thread in self._threads:
            thread.join(timeout)
        self._stop.set()

    def _done(self, partition: int) -> bool:
        until = self._until
        seen = self.offsets[partition]
        if until is None:
            return False
        return until[partition] < 0 or (bool(seen) and seen[-1] >= until[partition])

    def _read(self, partition: int) -> None:
        try:
            with self._client.subscribe(
                self._stream, partition=partition, start=StartAt.earliest()
            ) as sub:
                while not self._stop.is_set() and not self._done(partition):
                    began = time.monotonic()
                    try:
                        message = sub.get(timeout=0.2)
                    except TimeoutError:
                        continue
                    finally:
                        self.longest_get = max(self.longest_get, time.monotonic() - began)
                    self.offsets[partition].append(message.offset)
                    self.arrived_at[partition].append(time.monotonic())
        except Exception as exc:
            self.errors.append(exc)
