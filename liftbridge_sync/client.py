"""The :class:`Client`: one object, shared by every thread of a process.

A facade: each method is its signature, its documentation and one call to the layers
below (``_client`` holds the client's per-process state and its publish and admin calls,
``_wire`` builds requests, ``_transport.core`` routes and retries RPCs, ``_publishing``
publishes, ``subscription`` and ``consumer`` read). No logic lives here that another
module could own; ``tests/unit/test_client_facade.py`` keeps it under 450 lines of code.
"""

from __future__ import annotations

import concurrent.futures
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Unpack

from liftbridge_sync._client import admin, groups, publishing
from liftbridge_sync._client.session import Session
from liftbridge_sync._durations import check_seconds
from liftbridge_sync._publishing.publisher import Publisher
from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._runtime import fork as _fork
from liftbridge_sync._transport import cursors, leader
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.requests import (
    create_stream_request,
    delete_stream_request,
    pause_stream_request,
    set_stream_readonly_request,
)
from liftbridge_sync._wire.validate import (
    check_name,
    check_timeout,
)
from liftbridge_sync.consumer.group import Consumer
from liftbridge_sync.errors import ConfigurationError, LiftbridgeError
from liftbridge_sync.health import Health, probe
from liftbridge_sync.models import Ack, AckPolicy, Metadata, PartitionMetadata
from liftbridge_sync.options import ClientKwargs, ClientOptions, parse_addresses
from liftbridge_sync.partitioners import Partitioner
from liftbridge_sync.positions import StartAt, StopAt
from liftbridge_sync.stats import ClientStats
from liftbridge_sync.subscription.activity import ActivityStream, open_activity_stream
from liftbridge_sync.subscription.opening import open_subscription
from liftbridge_sync.subscription.partition import Subscription
from liftbridge_sync.subscription.stream import StreamSubscription, open_stream_subscription

if TYPE_CHECKING:
    from liftbridge_sync.otel import Telemetry

__all__ = ["BatchItem", "Client"]

#: One message of :meth:`Client.publish_batch`: a value, ``(key, value)``, or
#: ``(key, value, headers)``.
BatchItem = (
    bytes | tuple[bytes | None, bytes] | tuple[bytes | None, bytes, Mapping[str, bytes] | None]
)


class Client:
    """A Liftbridge client for synchronous code.

    ``Client(["host1:9292", "host2:9292"])`` takes a seed list; more brokers are learnt
    from cluster metadata. Nothing happens on construction: channels open on first use,
    so a client may be created at import time of a web app, before a worker forks.

    Example::

        with Client("localhost:9292") as client:
            client.create_stream("orders", "orders", partitions=4, exist_ok=True)
            print(client.fetch_metadata("orders").streams["orders"])

    Args:
        addresses: Seed brokers as ``"host:port"``, a sequence or a comma-separated str;
            an IPv6 host in brackets (``"[::1]:9292"``), else a ``ConfigurationError``.
        **options: Any field of :class:`~liftbridge_sync.options.ClientOptions` but
            ``addresses`` (``tls``, ``retry``, ``rpc_timeout``, ``ack_timeout``,
            ``max_in_flight``, ``publish_transport``, ...).
        tracer_provider: OpenTelemetry tracer provider (default: the global one).
        meter_provider: OpenTelemetry meter provider (default: the global one).
        stats_callback: Called with a :class:`ClientStats` every ``stats_interval``
            seconds on the ``liftbridge-stats`` thread (``None``: no thread).
        stats_interval: Seconds between two ``stats_callback`` calls (at least 0.001).

    Raises:
        ConfigurationError: if an address or option is invalid.
        ArgumentTypeError: ``tracer_provider`` or ``meter_provider`` is no
            OpenTelemetry provider (or ``None``).

    Thread-safe: share one client between all threads of a process. Fork-safe: in a
    forked child the client reconnects on first use with fresh channels, as redis-py
    does, and never touches its parent's connections (a subscription or future carried
    across the fork raises :class:`ForkedClientError`). Not picklable: ship
    :class:`ClientOptions` and call :meth:`for_process` instead.
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        stats_callback: Callable[[ClientStats], object] | None = None,
        stats_interval: float = 60.0,
        **options: Unpack[ClientKwargs],
    ) -> None:
        #: The client's state in this process (core, publisher, telemetry, stats thread).
        self._session = Session(
            ClientOptions(addresses=parse_addresses(addresses), **options),
            tracer_provider,
            meter_provider,
            stats_callback,
            stats_interval,
        )
        self._options = self._session.options

    @classmethod
    def from_options(cls, options: ClientOptions) -> Client:
        """Build a client from a :class:`ClientOptions` value."""
        if not isinstance(options, ClientOptions):
            raise ConfigurationError("options must be a ClientOptions")
        client = cls.__new__(cls)
        client._session = Session(options)
        client._options = options
        return client

    @classmethod
    def for_process(cls, options: ClientOptions) -> Client:
        """The one shared client of this process for ``options``, created on first call.

        Meant for code that runs in worker processes (Spark executors, Celery, gunicorn):
        ship the picklable ``options`` and call this in the worker. A forked child gets
        its own client, never its parent's. Once closed, the client is no longer kept:
        the next call for ``options`` makes a new one.
        """
        if not isinstance(options, ClientOptions):
            raise ConfigurationError("options must be a ClientOptions")
        client: Client = _fork.per_process(
            options, lambda: cls.from_options(options), usable=lambda c: not c.closed
        )
        return client

    # ------------------------------------------------------------------ lifecycle

    @property
    def options(self) -> ClientOptions:
        """The options this client was built with."""
        return self._options

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._session.closed

    @property
    def _core(self) -> ClientCore:
        """The current core (a fresh one after a fork)."""
        return self._session.core

    @property
    def _publisher(self) -> Publisher | None:
        """The publisher, once the first publish made it."""
        return self._session.publisher

    @property
    def _telemetry(self) -> Telemetry | None:
        """Set with the publisher: ``None`` unless an OpenTelemetry SDK is configured."""
        return self._session.telemetry

    def close(self, timeout: float | None = None) -> None:
        """Close subscriptions and the publisher, then the channels. Idempotent.

        With a ``stats_callback``, no call of it starts once ``close()`` began, and one
        under way is waited for (at most 30 s, whatever ``timeout`` is): when
        ``close()`` returns, the ``liftbridge-stats`` thread has ended.

        Closing the publisher takes ``timeout`` (``None``: until the last pending ack
        timeout) plus one second at most, whatever the broker does: at the deadline a
        connect or handshake still waiting for a broker is abandoned, and a stream the
        broker does not end is cancelled, so every publish still pending has failed
        when it returns. Only what the library cannot wake holds the
        ``liftbridge-publisher`` thread longer (a done-callback that blocks, a slow name
        lookup): it is not waited for then, and ends by itself (daemonic) once that
        returns. A call of another thread still asking a broker whether it speaks TLS
        (before its first channel to it) is cut short once the channels close: it
        raises :class:`ClientClosedError`. So does, at once and unsent, a publish of
        another thread still waiting for a free slot (``max_in_flight``) when
        ``close()`` begins (a ``publish_batch`` gets it for what it had not sent yet);
        what was sent is waited for.

        A ``timeout`` it cannot take is refused before anything is closed: the client
        stays open and usable (and :meth:`for_process` keeps handing it out), as no
        other value would say how long the caller meant its pending publishes to have.
        Call ``close()`` again with a valid one (``with Client(...)`` closes with
        ``None``).

        Args:
            timeout: Seconds to wait for pending publishes to be acknowledged before
                they fail with :class:`ClientClosedError` (``None``: wait for each
                until its ack timeout, when it fails with :class:`AckTimeoutError`).

        Raises:
            ArgumentTypeError: ``timeout`` is no number (nothing is closed).
            ConfigurationError: ``timeout`` is NaN, negative or above ~24 days
                (nothing is closed).

        Thread-safe.
        """
        # First: the registry below must not forget a client left open.
        check_timeout("timeout", timeout)
        try:
            self._session.close(timeout)
        finally:
            # A for_process client: its next call makes a new one; this one may go.
            _fork.release(self)

    def __enter__(self) -> Client:
        self._session.check()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # As for an unclosed file or socket: threads, channels and sockets stay until
        # the process exits. Not closed here: a subscription or future of this client
        # may still be in use, and the collecting thread could be one close() joins.
        session = getattr(self, "_session", None)
        if session is not None and session.left_open():
            warnings.warn(
                f"unclosed {self!r}: its threads and connections stay until the process "
                "exits; call close() or use it in a with block",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )

    def __reduce__(self) -> Any:
        raise TypeError(
            "Client is not picklable: it owns network connections and threads. Ship its "
            "ClientOptions (client.options) instead and call Client.for_process(options) "
            "in the other process."
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Client {','.join(self._options.addresses)} {state}>"

    # ------------------------------------------------------------------ metadata

    def fetch_metadata(self, *streams: str) -> Metadata:
        """Ask the cluster for metadata, always from the server, and refresh the cache.

        Args:
            *streams: Stream names to describe; none means every stream. Streams the
                server does not know are absent from the result.

        Returns:
            A :class:`Metadata` snapshot with brokers and the requested streams.
        """
        core = self._session.check()
        return core.fetch_metadata([check_name("streams", s, allow_reserved=True) for s in streams])

    def check_health(self, timeout: float = 5.0) -> Health:
        """Whether the cluster answers now: fresh metadata from a broker within ``timeout``.

        Brokers are asked one after another (known brokers, then the seeds), each for at
        most the time left, and again after a short pause while the budget lasts (a
        distant broker's first connection attempt can fail fast): meant for readiness
        endpoints and health checks, which must answer in time. The fresh metadata also
        refreshes the cache.

        Args:
            timeout: Seconds for the whole check (finite, > 0).

        Returns:
            A :class:`~liftbridge_sync.health.Health` naming the broker that answered.

        Raises:
            BrokerUnavailableError: no broker answered in time; the message gives each
                address tried and why it failed.
            ClientClosedError: the client is closed, or was closed during the check.
            ConfigurationError: on a bad ``timeout``.
        """
        return probe(self._session.check(), timeout)

    def fetch_partition_metadata(self, stream: str, partition: int = 0) -> PartitionMetadata:
        """Authoritative partition state (offsets, ISR, paused, readonly) from its leader.

        Raises:
            NoSuchStreamError: if the stream does not exist.
            NoSuchPartitionError: if the stream has no such partition.
        """
        return leader.fetch_partition_metadata(self._session.check(), stream, partition)

    # ------------------------------------------------------------------ streams

    def create_stream(
        self,
        subject: str,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        group: str | None = None,
        retention_max_bytes: int | None = None,
        retention_max_messages: int | None = None,
        retention_max_age: float | timedelta | None = None,
        cleaner_interval: float | timedelta | None = None,
        segment_max_bytes: int | None = None,
        segment_max_age: float | timedelta | None = None,
        compact_enabled: bool | None = None,
        compact_max_goroutines: int | None = None,
        auto_pause_time: float | timedelta | None = None,
        auto_pause_disable_if_subscribers: bool | None = None,
        min_isr: int | None = None,
        optimistic_concurrency_control: bool | None = None,
        encryption: bool | None = None,
        exist_ok: bool = False,
    ) -> bool:
        """Create a stream. ``None`` for any option means "use the server's default".

        Args:
            subject: NATS subject of partition 0; partition N listens on ``<subject>.<N>``.
                Wildcards are allowed where every partition's subject stays valid:
                ``*`` tokens, and ``>`` as the last token of a one-partition stream.
            name: Stream name, unique in the cluster.
            partitions: Number of partitions, from 1 to 1,000 (each costs every
                replica files and memory at once; the call may take
                ``rpc_timeout`` plus 20 ms a partition).
            replication_factor: Replicas per partition; ``-1`` means every server.
            group: NATS queue group shared by streams that split one subject.
            retention_max_bytes: Maximum log size in bytes (0 = unlimited).
            retention_max_messages: Maximum number of messages (0 = unlimited).
            retention_max_age: Maximum message age, seconds or timedelta (0 or inf: no limit).
            cleaner_interval: How often retention and compaction run (> 0).
            segment_max_bytes: Maximum size of one log segment, bytes.
            segment_max_age: Age after which a segment rolls (0 or inf: by size only).
            compact_enabled: Keep only the latest message per key.
            compact_max_goroutines: Compaction workers (>= 1).
            auto_pause_time: Idle time after which a partition pauses (0 or inf: never).
            auto_pause_disable_if_subscribers: Do not auto-pause while subscribed.
            min_isr: In-sync replicas required to commit (>= 1, at most
                ``replication_factor``, or the number of servers when it is ``-1``).
            optimistic_concurrency_control: Enforce ``expected_offset`` on publishes.
            encryption: Encrypt data at rest (the server needs LIFTBRIDGE_ENCRYPTION_KEY).
            exist_ok: Return ``False`` instead of raising if the name is taken.

        Returns:
            ``True`` if the stream was created, ``False`` if it existed and ``exist_ok``.

        Raises:
            ConfigurationError: on a bad argument, before the stream is created (with
                ``replication_factor=-1`` and ``min_isr``, after asking the cluster
                how many servers it has).
            StreamExistsError: if the name is taken and not ``exist_ok``.
        """
        return admin.create_stream(
            self._session.check(),
            create_stream_request(
                subject=subject,
                name=name,
                partitions=partitions,
                replication_factor=replication_factor,
                group=group,
                retention_max_bytes=retention_max_bytes,
                retention_max_messages=retention_max_messages,
                retention_max_age=retention_max_age,
                cleaner_interval=cleaner_interval,
                segment_max_bytes=segment_max_bytes,
                segment_max_age=segment_max_age,
                compact_enabled=compact_enabled,
                compact_max_goroutines=compact_max_goroutines,
                auto_pause_time=auto_pause_time,
                auto_pause_disable_if_subscribers=auto_pause_disable_if_subscribers,
                min_isr=min_isr,
                optimistic_concurrency_control=optimistic_concurrency_control,
                encryption=encryption,
            ),
            exist_ok,
        )

    def delete_stream(self, name: str) -> None:
        """Delete a stream and all its partitions.

        Raises:
            NoSuchStreamError: if the stream does not exist.
        """
        admin.delete_stream(self._session.check(), delete_stream_request(name))

    def pause_stream(
        self, name: str, *, partitions: Iterable[int] | None = None, resume_all: bool = False
    ) -> None:
        """Pause partitions (all by default); a publish to a paused partition resumes it.

        Args:
            name: Stream name.
            partitions: Partition ids to pause; ``None`` pauses every partition.
            resume_all: A publish to any partition resumes every paused partition.

        Raises:
            NoSuchStreamError: if the stream does not exist.
            NoSuchPartitionError: if a listed partition does not exist.
        """
        admin.pause_stream(
            self._session.check(), pause_stream_request(name, partitions, resume_all)
        )

    def set_stream_readonly(
        self, name: str, *, partitions: Iterable[int] | None = None, readonly: bool = True
    ) -> None:
        """Make partitions (all by default) read-only, or writable again.

        Raises:
            NoSuchStreamError: if the stream does not exist.
            NoSuchPartitionError: if a listed partition does not exist.
        """
        admin.set_stream_readonly(
            self._session.check(), set_stream_readonly_request(name, partitions, readonly)
        )

    # ------------------------------------------------------------------ cursors

    def set_cursor(self, cursor_id: str, stream: str, partition: int, offset: int) -> None:
        """Store ``offset`` under ``cursor_id`` for a stream partition.

        Following the Go client, a cursor holds the last *processed* offset; reading
        resumes at cursor + 1. The server would store a cursor for any name, so the
        client first checks the cluster's metadata (refreshed once when it lacks the
        stream or partition, so a stream created a moment ago works).

        Raises:
            NoSuchStreamError: the cluster has no such stream.
            NoSuchPartitionError: the stream has no such partition.
        """
        cursors.set_cursor(
            self._session.check(), cursor_id, stream, partition, offset, must_exist=True
        )

    def fetch_cursor(self, cursor_id: str, stream: str, partition: int) -> int:
        """The offset stored under ``cursor_id``, or ``-1`` if none was stored.

        Raises:
            NoSuchStreamError: the cluster has no such stream.
            NoSuchPartitionError: the stream has no such partition (both as for
                :meth:`set_cursor`).
        """
        return cursors.fetch_cursor(
            self._session.check(), cursor_id, stream, partition, must_exist=True
        )

    # ------------------------------------------------------------------ publish

    def publish_async(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[Ack | None]:
        """Publish a message without waiting; the future resolves with its :class:`Ack`.

        All publishes of a client share one pipelined ``PublishAsync`` stream, so messages
        to one partition keep the order in which they were submitted. If the stream
        breaks (server restart, broker failure) it is reopened and unacknowledged
        messages are re-sent in order: delivery is **at-least-once**. The one exception
        to the order: publishes that a failing partition leader lost silently are re-sent
        once that is proven, and the new leader may have stored later publishes of the
        partition before them (those of other threads, or those sent after the silence
        began). A caller that needs a strict order across failovers waits for each ack
        (:meth:`publish`) or uses ``expected_offset``.

        Args:
            stream: Stream name.
            value: Payload, bytes-like (``str`` raises ``TypeError``: encode it).
            key: Optional key (compaction, key partitioning).
            partition: Target partition (default 0 unless a partitioner is given).
            partitioner: Chooses the partition, e.g. :class:`~liftbridge_sync.ByKey`; the
                partition count is taken from (or fetched into) the metadata cache.
            headers: ``str`` to bytes-like headers. The server sets ``subject`` and
                ``reply`` on every message it stores, replacing headers of those names.
            ack_policy: ``LEADER`` (default), ``ALL``, or ``NONE`` (the future resolves
                with ``None`` once the message is sent).
            expected_offset: Optimistic concurrency: the offset the message must get
                (streams created with ``optimistic_concurrency_control=True``).
            correlation_id: Id echoed in the ack (default: a unique generated id). A
                publish under an id already awaiting an ack is not sent: its future
                fails with :class:`ConfigurationError` (nothing is raised). Acks
                are matched by id alone, as in every Liftbridge client: reusing the id of
                a publish that failed with :class:`AckTimeoutError` lets that publish's
                late ack, if the broker sends one, settle the new one.
            timeout: Seconds until the future fails with :class:`AckTimeoutError`
                (default ``ack_timeout``, 30 s), counted from when the message is sent:
                a publish that first waits for a free slot (``max_in_flight``) waits up
                to ``enqueue_timeout`` for it.

        Returns:
            A ``concurrent.futures.Future``. It fails with a typed error:
            :class:`NoSuchStreamError`, :class:`NoSuchPartitionError`,
            :class:`ReadonlyPartitionError`,
            :class:`IncorrectOffsetError`, :class:`PermissionDeniedError`,
            :class:`PublishRejectedError` (``code``: TOO_LARGE, BAD_REQUEST, ...),
            :class:`AckTimeoutError` (sent, no ack in time: it may be stored),
            :class:`BrokerUnavailableError` (never sent: no broker could be reached
            within the ``retry`` policy's bound) or :class:`ClientClosedError`.
            Done-callbacks run on the publisher thread; they may publish, flush or
            close.

        Raises:
            TypeError: ``value``/``key``/``headers`` are not bytes-like.
            ConfigurationError: other bad arguments, before anything is sent.
            PublishQueueFullError: ``max_in_flight`` reached and no slot freed in time.
            ClientClosedError: the client is closed.
        """
        return publishing.publish_async(
            self._session,
            stream,
            value,
            key,
            partition,
            partitioner,
            headers,
            ack_policy,
            expected_offset,
            correlation_id,
            timeout,
        )

    def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publish a message and wait for its :class:`Ack` (``None`` for AckPolicy.NONE).

        Same arguments and errors as :meth:`publish_async`, raised here instead of set on
        a future. Many threads calling ``publish`` share one pipelined stream; the
        calling thread writes its message itself when the stream's I/O thread is idle,
        and, when its ack is the only one due, reads that ack itself too (the default
        ``"h2"`` transport), so a call needs no other thread.
        In a done-callback nested more than 32 deep it raises ``PublishError`` before
        anything is sent (publish_async never has that limit).
        """
        return publishing.publish(
            self._session,
            stream,
            value,
            key,
            partition,
            partitioner,
            headers,
            ack_policy,
            expected_offset,
            correlation_id,
            timeout,
        )

    def publish_batch(
        self,
        stream: str,
        messages: Iterable[BatchItem],
        *,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout: float | None = None,
    ) -> list[Ack | None | LiftbridgeError]:
        """Publish many messages in order and wait for all of them: the bulk API.

        Messages are pipelined on the client's one ``PublishAsync`` stream, as many at a
        time as ``max_in_flight`` allows (so a batch larger than that waits for acks as
        it goes), and written together. Delivery is **at-least-once** and, per
        partition, in the order given (a broken stream is reopened and what was not
        acknowledged is re-sent in order), except across a leader failover that lost
        publishes silently (see :meth:`publish_async`).

        Args:
            stream: Stream name.
            messages: Values (bytes-like), ``(key, value)`` pairs, or ``(key, value,
                headers)`` triples (``headers`` a mapping of str to bytes, or ``None``);
                kinds may be mixed.
            partition: Target partition of every message (default 0 unless a
                partitioner is given).
            partitioner: Chooses each message's partition, e.g.
                :class:`~liftbridge_sync.ByKey`.
            ack_policy: ``LEADER`` (default), ``ALL`` or ``NONE``.
            timeout: Seconds each message may wait for its ack once sent (default
                ``ack_timeout``); a message sent late in a long batch, after waiting for
                room in the window, has the whole timeout too.

        Returns:
            One outcome per message, in order: its :class:`Ack` (``None`` with
            AckPolicy.NONE), or the typed error that failed it
            (:class:`~liftbridge_sync.errors.PublishError` subclasses such as
            :class:`AckTimeoutError`, :class:`PublishRejectedError`,
            :class:`ReadonlyPartitionError`, or :class:`ClientClosedError`). Returned
            errors count as observed: ``flush()`` does not report them again.

        Raises:
            TypeError: a value, key or header is not bytes-like, an item is a tuple of
                another length, or ``messages`` is no iterable of items (before
                anything is sent): an :class:`ArgumentTypeError`.
            ConfigurationError: other bad arguments (before anything is sent), such
                as a message over the server's 4 MiB limit (a
                :class:`MessageTooLargeError`).
            ClientClosedError: the client is closed.
            PublishQueueFullError: no slot (``max_in_flight``) freed within
                ``enqueue_timeout`` before anything was sent (once something was, the
                messages not sent get it as their outcome instead).
            PublishError: in a done-callback nested more than 32 deep, as ``publish``
                (before anything is sent).

        Thread-safe: batches and single publishes from several threads share the stream.
        """
        return publishing.publish_batch(
            self._session,
            stream,
            messages,
            partition,
            partitioner,
            ack_policy,
            timeout,
        )

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every publish made so far has been acknowledged or has failed.

        No failure passes silently: if, since the previous ``flush()``, a publish failed
        and its future was dropped (garbage-collected) without anybody having called
        ``result()`` or ``exception()`` on it (a done-callback that calls one counts), this
        raises :class:`~liftbridge_sync.errors.UnobservedPublishFailuresError` with the
        count and the first causes (then forgets them), as asyncio reports an exception
        that was never retrieved. A sink that calls ``publish_async`` per row without
        keeping the futures and ``flush()`` at the end therefore fails loudly instead of
        losing rows. A failed future that some thread still holds is left to that
        thread: it is reported only once dropped unlooked-at, so one thread's flush never
        raises for failures another thread is about to look at. To have a flush check
        futures you keep, look at them (``exception()``) after it.

        Raises:
            TimeoutError: if publishes are still pending after ``timeout`` seconds.
            UnobservedPublishFailuresError: see above.
        """
        self._session.flush(timeout)

    def stats(self) -> ClientStats:
        """One snapshot: the publisher's counters, each reader's lag, the open channels.

        Lag is asked of each read partition's leader (its high watermark), so this makes
        one RPC per partition being read; a leader that does not answer within the
        retry policy leaves that lag ``None``. ``Client(..., stats_callback=fn,
        stats_interval=60)`` hands a snapshot to ``fn`` at that interval on the
        ``liftbridge-stats`` thread.
        """
        return self._session.stats()

    def publisher_stats(self) -> PublisherStats:
        """What the publisher has done so far: in flight, stream (re)connects, re-sends.

        Each re-send (after a broken stream, or after a leader failover or NATS restart
        silently lost publishes; see ``resend_after``) may have stored a duplicate:
        delivery is at-least-once. All zero before the first publish.
        """
        return self._session.publisher_stats()

    def publish_to_subject(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        ack_inbox: str | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publish to a literal NATS subject (any stream listening on it stores it).

        Headers are sent (the Go client drops them). When an ack is wanted the call
        carries a deadline, so the server waits for the first ack. A stream with
        optimistic concurrency control refuses every message published this way with
        :class:`IncorrectOffsetError`: the request has no expected offset to give it.

        Args:
            timeout: Seconds for the whole call (default: the client's ``ack_timeout``):
                every attempt and the back-off between them. A broker unreachable at
                one attempt is retried under the retry policy, each attempt getting the
                time left, and no retry starts once the time is up.

        Returns:
            The first :class:`Ack`, or ``None`` for AckPolicy.NONE.

        Raises:
            AckTimeoutError: no stream acknowledged the message within ``timeout``.
            BrokerUnavailableError: no broker could be reached within ``timeout`` (the
                last attempt's error).
            PublishRejectedError, IncorrectOffsetError: the leader refused the message.
            ConfigurationError: ``subject`` is a subject of the server's own streams
                ``__cursors`` or ``__activity`` (told by the client's metadata), or
                another argument is invalid.
        """
        return publishing.publish_to_subject(
            self._session,
            subject,
            value,
            key,
            headers,
            ack_policy,
            ack_inbox,
            correlation_id,
            timeout,
        )

    # ------------------------------------------------------------------ subscribe

    def subscribe(
        self,
        stream: str,
        *,
        partition: int = 0,
        start: StartAt | None = None,
        stop: StopAt | None = None,
        read_isr_replica: bool = False,
        resume: bool = False,
        reverse: bool = False,
    ) -> Subscription:
        """Read one stream partition as a blocking iterator.

        Example::

            with client.subscribe("orders", start=StartAt.earliest()) as sub:
                for msg in sub:
                    handle(msg)

        Args:
            stream: Stream name.
            partition: Partition id.
            start: Where to begin (default :meth:`StartAt.new_only`).
            stop: Where to end (default: never): the last message at or before it is the
                last one delivered, then the iterator finishes. No offset past the stop is
                ever delivered, also when compaction or retention removed the stop offset
                itself. A range with nothing in it (a start past the end, a stop before
                the start) is an empty iterator, not an error.
            read_isr_replica: Read from a random in-sync replica instead of the leader.
            resume: Resume the partition first if it is paused.
            reverse: Deliver newest to oldest (servers newer than v1.9.0).

        Returns:
            A :class:`~liftbridge_sync.subscription.Subscription`; it resubscribes from the
            last offset after failover.
        """
        return open_subscription(
            self._session.check(),
            stream,
            partition=partition,
            start=start,
            stop=stop,
            read_isr_replica=read_isr_replica,
            resume=resume,
            reverse=reverse,
        )

    def subscribe_stream(
        self,
        stream: str,
        *,
        start: StartAt | None = None,
        stop: StopAt | None = None,
        read_isr_replica: bool = False,
        resume: bool = False,
    ) -> StreamSubscription:
        """Read every partition of a stream as one iterator.

        Order is kept within each partition; each message says its partition and offset.
        Each partition resubscribes on its own after failover.
        """
        return open_stream_subscription(
            self._session.check(),
            stream,
            start=start,
            stop=stop,
            read_isr_replica=read_isr_replica,
            resume=resume,
        )

    # ------------------------------------------------------------------ activity, groups

    def activity(
        self,
        *,
        start: StartAt | None = None,
        after_id: int | None = None,
        timeout: float = 10.0,
    ) -> ActivityStream:
        """Read the cluster's activity stream as typed events (see :mod:`.activity`).

        Example::

            with client.activity(start=StartAt.earliest()) as events:
                for event in events:
                    print(event)  # StreamCreated(id=..., stream='orders', ...)

        Args:
            start: Where to begin in ``__activity`` (default :meth:`StartAt.new_only`,
                or :meth:`StartAt.earliest` with ``after_id``).
            after_id: Drop events with this id or a lower one: resuming after the last
                event an earlier stream delivered, give its ``id`` here and its
                ``offset + 1`` as ``start``, so that a repeat of an event handled before
                (published again after a metadata-leader change) is not delivered again.
            timeout: Seconds to wait for ``__activity`` to exist (0: do not wait). A new
                cluster creates it when it elects its first metadata leader, a few seconds
                after its servers start; a server without the activity stream never does,
                and then this call fails after ``timeout``. It bounds that wait only:
                each look for the stream is an RPC under the client's retry policy
                (``rpc_timeout`` an attempt), so a broker that does not answer holds
                the call that long, as it holds any other call.

        Returns:
            An :class:`~liftbridge_sync.subscription.activity.ActivityStream`; it
            resubscribes after failover like any subscription and drops repeated events
            (those with the id of one of the last 4096 delivered).

        Raises:
            ActivityStreamDisabledError: ``__activity`` did not exist within ``timeout``:
                the server runs without ``activity.stream.enabled: true`` (a
                ``NoSuchStreamError``).
            ConfigurationError: ``timeout`` is not a number >= 0, or ``after_id`` not
                an int in the range of event ids (an ``ArgumentTypeError`` if no int).
            ClientClosedError: The client is closed, or was closed during the wait.

        Thread-safe.
        """
        seconds = check_seconds("timeout", timeout, unlimited=False)
        assert seconds is not None
        return open_activity_stream(self._session.check(), start, seconds, after_id)

    def consumer(
        self,
        group: str,
        *,
        streams: Sequence[str],
        auto_commit: float | None,
        start: StartAt | None = None,
        consumer_id: str | None = None,
        rejoin: bool = True,
    ) -> Consumer:
        """Join a consumer group and read the partitions the server assigns to this member.

        Example::

            with client.consumer("billing", streams=["orders"], auto_commit=5.0) as c:
                for msg in c:
                    handle(msg)

        Args:
            group: Group id; the group is created by its first member.
            streams: Streams to consume (they must exist).
            auto_commit: Seconds between automatic commits of processed positions (at
                least 0.001; also committed when a partition moves away and on close),
                or ``None`` to commit only with :meth:`Consumer.commit`. Required: the
                choice is yours.
            start: Where a partition with no committed cursor begins:
                ``StartAt.new_only()`` (default), ``StartAt.earliest()`` or
                ``StartAt.latest()``.
            consumer_id: This member's id, unique in the group (default: generated).
            rejoin: When the server drops this member (it could not poll for longer
                than the server's consumer timeout), stop its readers without
                committing and join again from the committed cursors (default; a
                generated id is replaced by a new one). ``False``: the iterator raises
                ``ConsumerGroupNotFoundError`` or ``NotGroupMemberError`` instead.

        Returns:
            A joined :class:`~liftbridge_sync.consumer.Consumer`; close it (or use
            ``with``) to leave the group.

        Raises:
            ConfigurationError: on a bad argument.
            NoSuchStreamError: if a stream does not exist.
            ConsumerIdInUseError: if ``consumer_id`` is a member of the group already
                (another live member uses it, or one that ended without leaving was not
                expired by the server yet): nothing was started.
            InternalThreadError: if no thread could be started for it (the process is
                out of threads): it left the group again.
        """
        return groups.join(
            self._session.check(), group, streams, consumer_id, start, auto_commit, rejoin
        )
