"""Publishers that keep publishing through a fault, and reading back what was stored.

Shared by the restart tests (``test_publish_restarts.py``, ``test_publish_sigint.py``).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from liftbridge_sync import Ack, AckPolicy, Client, StartAt, StopAt

__all__ = ["Publishers", "read_back"]


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
            try:
                ack = self.client.publish(
                    self.stream, value, partition=i % self.partitions, ack_policy=AckPolicy.ALL
                )
            except Exception as exc:
                self.sync_errors.append(exc)
            else:
                self.sync_acks.append((value, ack))
                self._record(None)
            i += 1

    def longest_stall(self) -> float:
        with self._lock:
            times = sorted(self.done_at)
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def read_back(client: Client, stream: str, partitions: int) -> list[bytes]:
    """Every value stored in ``stream``, checking each partition's offsets increase."""
    values: list[bytes] = []
    for partition in range(partitions):
        offsets: list[int] = []
        with client.subscribe(
            stream, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
        ) as sub:
            for message in sub:
                offsets.append(message.offset)
                values.append(message.value)
        assert offsets == sorted(set(offsets)), f"partition {partition}: offsets out of order"
    return values
