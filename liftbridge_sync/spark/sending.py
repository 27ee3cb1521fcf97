"""Sending one Spark task's messages: runs of plain rows with ``publish_batch``, the
others one by one with ``publish_async``, in row order (see :mod:`.sink`).

Not thread-safe: one :class:`RowSender` per task.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from liftbridge_sync import (
    Ack,
    AckPolicy,
    ByKey,
    Client,
    ConfigurationError,
    LiftbridgeError,
    Partitioner,
    PublishRejectedError,
    partitioners,
)
from liftbridge_sync._runtime.fork import per_process
from liftbridge_sync.spark.rows import RowMessage

__all__ = [
    "NATS_DEFAULT_MAX_PAYLOAD",
    "PublishSummary",
    "RowSender",
    "RunInFlight",
    "SendOptions",
    "sink_partitioner",
]

#: The NATS server's default ``max_payload``: Liftbridge forwards each message to NATS in
#: an envelope, and NATS refuses a larger one ("maximum payload exceeded").
NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024


class SendOptions(Protocol):
    """What a :class:`RowSender` reads of the sink's options (``SinkOptions``)."""

    @property
    def stream(self) -> str | None: ...
    @property
    def partitioner(self) -> str: ...
    @property
    def ack_policy(self) -> AckPolicy: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def ack_timeout(self) -> float | None: ...


@dataclasses.dataclass(slots=True)
class PublishSummary:
    """What one partition published: row count and acked ``[first, last]`` offsets.

    ``acked`` maps stream name to partition id to ``[first_offset, last_offset]``.
    Not thread-safe: built by one task.
    """

    count: int = 0
    acked: dict[str, dict[int, list[int]]] = dataclasses.field(default_factory=dict)

    def add(self, ack: Ack | None) -> None:
        """Count one publish and widen the acked range of its partition."""
        self.add_outcomes((ack,))

    def add_outcomes(self, outcomes: Iterable[Ack | None | BaseException]) -> BaseException | None:
        """Count the publishes of ``outcomes`` up to the first failure, and widen the
        acked ranges of their partitions; that failure, or ``None``.

        One pass for a whole run: the acks of a run mostly share a partition, whose
        range is then looked up once, not once per ack."""
        count = 0
        acked = self.acked
        stream: str | None = None
        partition = -1
        span: list[int] = []
        failure: BaseException | None = None
        for ack in outcomes:
            if ack is None:  # ack policy NONE: published, no offset
                count += 1
                continue
            if isinstance(ack, BaseException):
                failure = ack
                break
            count += 1
            offset = ack.offset
            if ack.partition != partition or ack.stream != stream:
                stream, partition = ack.stream, ack.partition
                ranges = acked.setdefault(stream, {})
                found = ranges.get(partition)
                if found is None:
                    found = ranges[partition] = [offset, offset]
                span = found
            if offset < span[0]:
                span[0] = offset
            elif offset > span[1]:
                span[1] = offset
        self.count += count
        return failure


def sink_partitioner(name: str) -> Partitioner | None:
    """The partitioner a sink's ``partitioner`` option names (``None``: the ``partition``
    column, else partition 0): one per process and name.

    Each task makes a sender of its own, and a new ``RoundRobin`` starts every stream at
    partition 0: twenty one-row tasks (or micro-batches) all went to partition 0. Shared
    by the tasks a worker process runs, its rotation goes on from task to task.

    Thread-safe and fork-safe (:func:`~liftbridge_sync._runtime.fork.per_process`).
    """
    if name in partitioners.PARTITIONER_NAMES:
        return per_process(
            ("liftbridge_sync.spark.partitioner", name),
            lambda: partitioners.partitioner_named(name),
            usable=lambda _: True,
        )
    return None


def row_size(item: RowMessage | bytes | tuple[bytes | None, bytes]) -> int:
    """Bytes of a row's value, key and headers (a run item is a value or a key-value pair).

    Thread-safe: reads its argument only.
    """
    if isinstance(item, RowMessage):
        headers = item.headers or {}
        return (
            len(item.value)
            + len(item.key or b"")
            + sum(len(k.encode()) + len(v) for k, v in headers.items())
        )
    if isinstance(item, tuple):
        return len(item[0] or b"") + len(item[1])
    return len(item)


def with_row_size(exc: BaseException, stream: str, size: int) -> PublishRejectedError | None:
    """``exc`` naming the row's size and the limit when the server refused the row as over
    NATS's ``max_payload`` (whose own words give neither); else ``None``.

    Thread-safe: builds a new error.
    """
    if not isinstance(exc, PublishRejectedError) or (
        "maximum payload" not in str(exc).lower() and exc.code != "MAX_PAYLOAD"
    ):
        return None
    return PublishRejectedError(
        f"stream {stream!r}: a row of {size:,} bytes (value, key and headers) is over the "
        f"NATS server's max_payload ({NATS_DEFAULT_MAX_PAYLOAD:,} bytes unless the NATS "
        "server's configuration sets another; Liftbridge's envelope adds to the row, and "
        f"no option of the writer raises it): {exc}",
        code=exc.code,
        details=exc.details,
    )


class RunInFlight:
    """One run's ``publish_batch`` on a thread of its own (``liftbridge-spark-run``), so
    that the task reads and converts the next rows while this run waits for its acks.

    The thread is daemonic and joined by :meth:`outcomes`; ``publish_batch`` ends by
    itself (every message has an ack timeout). Not thread-safe: one owner.
    """

    def __init__(
        self,
        send: Callable[[], list[Ack | None | LiftbridgeError]],
        stream: str = "",
        items: list[Any] | None = None,
    ) -> None:
        #: The run's stream and items, to name a refused row's size.
        self.stream = stream
        self.items: list[Any] = items or []
        self._send = send
        self._outcomes: list[Ack | None | LiftbridgeError] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="liftbridge-spark-run", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcomes = self._send()
        except BaseException as exc:  # handed to the task's thread by outcomes()
            self._error = exc

    def outcomes(self) -> list[Ack | None | LiftbridgeError]:
        """Wait for the run: one outcome per message, as ``publish_batch`` returns them.

        Raises:
            What ``publish_batch`` raised.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._outcomes


class RowSender:
    """A task's messages on their way: a run of plain messages, or a window of futures.

    At most ``max_in_flight`` messages are unacknowledged at a time: a run is sent once
    the window and the run before it are acknowledged, and the window fills only then
    too; the next run is gathered meanwhile. Not thread-safe: one per task.
    """

    def __init__(self, client: Client, options: SendOptions) -> None:
        self.summary = PublishSummary()
        self._client = client
        self._options = options
        self._partitioner = sink_partitioner(options.partitioner)
        # Each future with its stream and message, to name a refused row's size.
        self._window: collections.deque[
            tuple[concurrent.futures.Future[Ack | None], str, RowMessage]
        ] = collections.deque()
        self._run: list[Any] = []
        self._run_stream = ""
        self._run_keyed = False
        self._in_flight: RunInFlight | None = None

    def add(self, message: RowMessage) -> None:
        """Publish ``message`` after every message added before it (per partition)."""
        stream = self._options.stream or message.stream
        if stream is None:
            raise ConfigurationError(
                "no target stream: set the 'stream' option or a 'stream' column"
            )
        plain = (
            message.partition is None and message.headers is None and message.correlation_id is None
        )
        if not plain:
            self._send_run()
            self._send_one(stream, message)
            return
        self._join_run(stream)
        if message.key is None:
            self._run.append(message.value)
        else:
            self._run.append((message.key, message.value))
            self._run_keyed = True
        if len(self._run) >= self._options.max_in_flight:
            self._send_run()

    def add_plain(self, stream: str, items: list[Any], keyed: bool) -> None:
        """Publish plain ``publish_batch`` items after every message added before them."""
        self._join_run(stream)
        limit = self._options.max_in_flight
        start = 0
        while start < len(items):
            room = limit - len(self._run)
            self._run.extend(items[start : start + room])
            self._run_keyed = self._run_keyed or keyed
            start += room
            if len(self._run) >= limit:
                self._send_run()

    def finish(self) -> None:
        """Send what is left and wait for every ack.

        Raises:
            PublishError: the first failed publish (the task fails; Spark retries it).
        """
        self._send_run()
        self._await_run()
        self._drain(0)

    def abandon(self) -> None:
        """Wait for the run in flight and observe every future still in the window.

        A failed task must not leave its publishes to a later task of this worker: a
        failure nobody looked at would be reported again by its ``flush()`` (a run's
        failures are returned, so they count as observed).
        """
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            with contextlib.suppress(Exception):  # the task is failing already
                in_flight.outcomes()
        while self._window:
            future = self._window.popleft()[0]
            if not future.cancel():
                future.exception()

    def _join_run(self, stream: str) -> None:
        """Gather the run of ``stream`` next: a run of another stream is sent first."""
        if self._run and stream != self._run_stream:
            self._send_run()
        self._run_stream = stream

    def _drain(self, keep: int) -> None:
        window = self._window
        while len(window) > keep:
            future, stream, message = window.popleft()
            try:
                ack = future.result()
            except PublishRejectedError as exc:
                sized = with_row_size(exc, stream, row_size(message))
                if sized is None:
                    raise
                raise sized from exc
            self.summary.add(ack)

    def _send_one(self, stream: str, message: RowMessage) -> None:
        options = self._options
        part = message.partition
        self._await_run()
        self._drain(options.max_in_flight - 1)
        future = self._client.publish_async(
            stream,
            message.value,
            key=message.key,
            partition=part,
            partitioner=self._partitioner if part is None else None,
            headers=message.headers,
            ack_policy=options.ack_policy,
            correlation_id=message.correlation_id,
            timeout=options.ack_timeout,
        )
        self._window.append((future, stream, message))

    def _send_run(self) -> None:
        run = self._run
        if not run:
            return
        self._drain(0)
        self._await_run()
        partitioner = self._partitioner
        if isinstance(partitioner, ByKey) and not self._run_keyed:
            partitioner = None  # every key is null: partition 0, as ByKey would choose
        self._in_flight = RunInFlight(
            functools.partial(
                self._client.publish_batch,
                self._run_stream,
                run,
                partition=None if partitioner is not None else 0,
                partitioner=partitioner,
                ack_policy=self._options.ack_policy,
                timeout=self._options.ack_timeout,
            ),
            self._run_stream,
            run,
        )
        self._run = []
        self._run_keyed = False

    def _await_run(self) -> None:
        """Wait for the run in flight; raise its first failure."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return
        outcomes = in_flight.outcomes()
        failure = self.summary.add_outcomes(outcomes)
        if failure is not None:
            index = next(i for i, outcome in enumerate(outcomes) if outcome is failure)
            sized = with_row_size(failure, in_flight.stream, row_size(in_flight.items[index]))
            if sized is not None:
                raise sized from failure
            raise failure
