"""The caller side of the NATS publisher: :class:`NatsPublisher` and its public API.

Validation, correlation ids, building envelopes into jobs, flush and close. The jobs go to
the ``liftbridge-nats`` thread through :class:`~._handoff.Handoff`, which owns the
thread, the writer on it and the book of jobs they share. Most of this module's length
is the public methods' documentation. Thread-safe as :class:`NatsPublisher` says.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import itertools
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from liftbridge_sync._wire.validate import (
    check_ack_policy,
    check_bool,
    check_bytes,
    check_headers,
    check_int,
    check_optional_text,
    check_publish_subject,
    refuse_wildcards,
)
from liftbridge_sync.envelope import check_raw_payload, new_message
from liftbridge_sync.errors import (
    AckTimeoutError,
    ArgumentTypeError,
    ClientClosedError,
    ConfigurationError,
    WaitTimeoutError,
)
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.nats._handoff import Handoff
from liftbridge_sync.nats._support import (
    DEFAULT_FLUSH_TIMEOUT,
    AckFuture,
    Job,
    check_nats_numbers,
    check_timeout_arg,
    import_nats,
    partition_subject,
    settle,
    wait_all,
    wait_future,
)

__all__ = ["NatsPublisher"]

#: Seconds a blocking publish waits beyond its timeout before failing the publish itself.
_WAIT_GRACE = 1.0


def _unknown_options(nats: Any, options: Mapping[str, object]) -> list[str]:
    """The names in ``options`` that ``nats.connect`` does not take, sorted."""
    parameters = inspect.signature(nats.aio.client.Client.connect).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []  # pragma: no cover - nats-py 2 names every option
    return sorted(set(options) - (set(parameters) - {"self"}))


class NatsPublisher:
    """Publish to Liftbridge streams directly over NATS, synchronously.

    Args:
        servers: NATS server URL(s) of the Liftbridge cluster, e.g.
            ``"nats://127.0.0.1:4222"`` (for the test harness: ``server.nats_url``).
        ack_timeout: Default seconds to wait for an ack before a publish fails with
            :class:`~liftbridge_sync.errors.AckTimeoutError`.
        connect_timeout: Seconds allowed for the first connection (on first use); also
            passed to nats-py as its per-attempt connect timeout.
        max_in_flight: Most publishes queued or awaiting their ack (or, for
            ``AckPolicy.NONE`` and :meth:`publish_raw`, NATS taking them) at once; one
            more waits for a slot within its timeout, then fails with
            :class:`~liftbridge_sync.errors.PublishQueueFullError`. It bounds the memory
            a NATS server that stops reading makes the publisher hold.
        **nats_options: Passed to ``nats.connect`` (``user``, ``password``, ``token``,
            ``tls``, ``name``, ``error_cb``, ``inbox_prefix``, ...). Callbacks run on
            the ``liftbridge-nats`` thread. ``max_reconnect_attempts`` defaults to -1
            (reconnect for as long as NATS is away; nats-py's own default, 60 attempts,
            closes the connection for good and fails every later publish).
            ``error_cb`` defaults to one WARNING line on the ``liftbridge_sync.nats``
            logger, at most one a minute (nats-py's own logs each error with a
            traceback).

    Nothing is connected or started in ``__init__``: the ``liftbridge-nats`` thread and
    the NATS connection are created on the first publish or flush. The publisher
    subscribes to its ack inbox (``<inbox_prefix>.<nuid>.acks``) before its first
    publish. Use it as a context manager or call :meth:`close`.

    Direct NATS publishes bypass the gRPC checks (see the module docs): a paused
    partition is not resumed and its messages are not stored, and a missing stream or a
    read-only partition gives no error, just an ack timeout. Nothing is re-sent
    (at-most-once delivery).

    Futures returned by :meth:`publish_async` are resolved on the ``liftbridge-nats``
    thread, so their done-callbacks run there; such a callback may call
    :meth:`publish_async`, :meth:`publish_raw` or :meth:`close`, but not the blocking
    :meth:`publish`, :meth:`publish_raw` or :meth:`flush` (they raise
    :class:`~liftbridge_sync.errors.WrongThreadError`, a ``RuntimeError``, there).

    Raises:
        ImportError: nats-py is not installed (``pip install liftbridge-sync[nats]``).
        ConfigurationError: A timeout is not a positive number, ``max_in_flight`` not
            an int >= 1, ``servers`` is empty, or an option is not one ``nats.connect``
            takes (a value it refuses is a ``ConfigurationError`` at the first
            connection).

    Thread-safe: any number of threads may publish through one instance concurrently.
    """

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        ack_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        max_in_flight: int = 1024,
        **nats_options: Any,
    ) -> None:
        self._nats = import_nats()
        if isinstance(servers, str):
            server_list = [servers]
        else:
            server_list = list(servers)
        if not server_list or not all(isinstance(s, str) and s for s in server_list):
            raise ConfigurationError("'servers' must be a non-empty str or sequence of str")
        self._servers = server_list
        ack = check_timeout_arg("ack_timeout", ack_timeout, optional=False)
        conn = check_timeout_arg("connect_timeout", connect_timeout, optional=False)
        assert ack is not None and conn is not None
        self._ack_timeout = ack
        self._max_in_flight = check_int("max_in_flight", max_in_flight, minimum=1)
        self._nats_options = dict(nats_options)
        unknown = _unknown_options(self._nats, nats_options)
        if unknown:
            raise ConfigurationError(
                f"unknown NATS option(s) {', '.join(map(repr, unknown))}: not an argument "
                "of nats.connect"
            )
        check_nats_numbers(self._nats_options)
        # What nats-py buffers before a publish waits for a flush (see LoopWriter._publish).
        pending_limit_value: int = nats_options.get(
            "pending_size", self._nats.aio.client.DEFAULT_PENDING_SIZE
        )
        inbox_prefix = nats_options.get("inbox_prefix", "_INBOX")
        if isinstance(inbox_prefix, bytes):
            inbox_prefix = inbox_prefix.decode()
        if not isinstance(inbox_prefix, str):
            # Else it passed here and failed at the first connect, as an unreachable
            # NATS (BrokerUnavailableError), after connect_timeout.
            raise ArgumentTypeError(
                f"NATS option 'inbox_prefix' must be a str, got {type(inbox_prefix).__name__}"
            )
        nuid = self._nats.nuid.NUID().next().decode()
        self._ack_inbox = check_publish_subject("inbox_prefix", f"{inbox_prefix}.{nuid}.acks")
        self._id_prefix = f"{os.getpid():x}.{random.getrandbits(48):012x}."
        self._ids = itertools.count()

        self._handoff = Handoff(
            self._nats,
            servers=server_list,
            connect_timeout=conn,
            nats_options=self._nats_options,
            ack_inbox=self._ack_inbox,
            pending_limit=pending_limit_value,
            max_in_flight=self._max_in_flight,
        )

    # ------------------------------------------------------------------ properties

    @property
    def ack_inbox(self) -> str:
        """The NATS subject this publisher receives acks on."""
        return self._ack_inbox

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._handoff.closed

    def __repr__(self) -> str:
        handoff = self._handoff
        state = "closed" if handoff.closed else ("running" if handoff.started else "idle")
        return f"<NatsPublisher servers={self._servers!r} {state}>"

    def __enter__(self) -> NatsPublisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ public API

    def next_correlation_id(self) -> str:
        """A correlation id unique to this publisher (random prefix + counter).

        Thread-safe.
        """
        return f"{self._id_prefix}{next(self._ids)}"

    def publish_async(
        self,
        stream_subject: str,
        value: bytes,
        *,
        partition: int = 0,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
        crc: bool = True,
    ) -> AckFuture:
        """Publish an envelope to a partition's NATS subject without waiting.

        Messages published through one publisher reach NATS in the order of the
        ``publish_async``/``publish_raw`` calls that enqueued them.

        Args:
            stream_subject: The stream's NATS subject (not its name).
            value: Payload, bytes-like (``str`` raises ``TypeError``: encode it).
            partition: Partition id; the message goes to ``stream_subject`` for 0 and to
                ``<stream_subject>.<partition>`` otherwise. Not checked against the
                stream: a partition nobody leads ends in an ack timeout.
            key: Optional message key.
            headers: ``str`` to bytes-like headers (the server overwrites ``subject``
                and ``reply``).
            ack_policy: ``LEADER`` (default) or ``ALL`` wait for the leader's ack;
                ``NONE`` resolves the future with ``None`` once NATS has the message
                (a PING/PONG round trip after it was written).
            expected_offset: Optimistic concurrency (streams created with
                ``optimistic_concurrency_control=True``): the offset the message must
                get (an int >= 0, as for ``Client.publish``); ``None`` for no check.
                Needs an ack policy other than NONE.
            correlation_id: Id echoed in the ack (default: a generated unique id); must
                not equal the id of another publish still awaiting its ack.
            timeout: Seconds until the future fails with :class:`AckTimeoutError`
                (default: the publisher's ``ack_timeout``), counted from this call:
                waiting for a free slot (``max_in_flight``) uses it up too.
            crc: Add the CRC-32C of the payload to the envelope header (the server
                checks it; a message failing the check would be stored verbatim).

        Returns:
            A future resolving to the :class:`~liftbridge_sync.models.Ack` (with
            ``partition`` set to ``partition``) or ``None`` for ``AckPolicy.NONE``. It
            fails with :class:`~liftbridge_sync.errors.AckTimeoutError`,
            :class:`~liftbridge_sync.errors.IncorrectOffsetError`,
            :class:`~liftbridge_sync.errors.PublishRejectedError` (``code``
            ``TOO_LARGE``, ``ENCRYPTION``, or ``MAX_PAYLOAD`` when a reconnect reached
            a NATS server with a smaller ``max_payload``),
            :class:`~liftbridge_sync.errors.BrokerUnavailableError` (NATS connection
            lost) or :class:`~liftbridge_sync.errors.ClientClosedError`.

        Raises:
            TypeError: ``value``/``key``/``headers`` are not bytes-like.
            ConfigurationError: Any other invalid argument (checked before anything is
                sent or connected), or a duplicate pending ``correlation_id``.
            MessageTooLargeError: The envelope is over the connected NATS server's
                ``max_payload`` (1 MiB by default); nothing is queued.
            BrokerUnavailableError: The first connection to NATS failed (a
                ``ConfigurationError`` when nats-py refused an option's value).
            LocalResourceError: The process has no file descriptor left to connect.
            PublishQueueFullError: ``max_in_flight`` publishes were pending and no slot
                freed within ``timeout`` (at once on the ``liftbridge-nats`` thread, in a
                done-callback: only that thread frees slots).
            ClientClosedError: The publisher is closed.
            ForkedClientError: In a process forked after the publisher started (its
                thread and connection are the parent's): create one in the child.
            WrongThreadError: In a nats-py callback (``error_cb``, ...) while the
                first connection is made: it would wait for its own thread.

        Thread-safe.
        """
        subject = partition_subject(stream_subject, partition)
        refuse_wildcards("stream_subject", stream_subject)
        check_ack_policy(ack_policy)
        if ack_policy is AckPolicy.NONE and expected_offset is not None:
            raise ConfigurationError(
                "'expected_offset' needs an ack policy other than AckPolicy.NONE: the "
                "outcome of the offset check is only reported in the ack"
            )
        check_bool("crc", crc)
        check_optional_text("correlation_id", correlation_id)
        seconds = check_timeout_arg("timeout", timeout, optional=True)
        ack_timeout = self._ack_timeout if seconds is None else seconds
        body = check_bytes("value", value)
        key_bytes = check_bytes("key", key, optional=True)
        checked_headers = check_headers(headers)
        wants_ack = ack_policy is not AckPolicy.NONE
        cid = correlation_id or self.next_correlation_id()
        payload = new_message(
            body if body is not None else b"",
            key=key_bytes,
            headers=checked_headers or None,
            ack_inbox=self._ack_inbox if wants_ack else None,
            correlation_id=cid,
            ack_policy=ack_policy,
            expected_offset=expected_offset,
            crc=crc,
        )
        job = Job(
            kind="ack" if wants_ack else "none",
            future=concurrent.futures.Future(),
            subject=subject,
            payload=payload,
            correlation_id=cid,
            partition=partition,
            deadline=time.monotonic() + ack_timeout,
        )
        self._handoff.submit(job)
        return job.future

    def publish(
        self,
        stream_subject: str,
        value: bytes,
        *,
        partition: int = 0,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
        crc: bool = True,
    ) -> Ack | None:
        """Publish an envelope and wait for its ack (``None`` for ``AckPolicy.NONE``).

        Same arguments as :meth:`publish_async`; the errors it would set on the future
        are raised here.

        Raises:
            AckTimeoutError: No ack within ``timeout`` (e.g. no such stream, a paused or
                read-only partition: direct NATS publishes cannot tell).
            IncorrectOffsetError: ``expected_offset`` did not match.
            PublishQueueFullError: ``max_in_flight`` publishes were pending and no slot
                freed within ``timeout``.
            WrongThreadError: Called on the ``liftbridge-nats`` thread (a done-callback).

        Thread-safe.
        """
        self._handoff.forbid_loop_thread("publish")
        future = self.publish_async(
            stream_subject,
            value,
            partition=partition,
            key=key,
            headers=headers,
            ack_policy=ack_policy,
            expected_offset=expected_offset,
            correlation_id=correlation_id,
            timeout=timeout,
            crc=crc,
        )
        seconds = self._ack_timeout if timeout is None else timeout
        result: Ack | None = self._wait_for(future, seconds)
        return result

    def publish_raw(self, subject: str, payload: bytes, *, reply: str | None = None) -> None:
        """Publish a plain NATS message (no envelope) and return once NATS has it queued.

        A Liftbridge leader stores data that is not an envelope verbatim as the value of
        a message (no key, no ack), with headers ``subject`` and ``reply``.

        Args:
            subject: Any NATS subject without wildcards (e.g. a stream subject or
                ``<subject>.<N>``).
            payload: The bytes to publish.
            reply: Optional NATS reply subject (stored in the ``reply`` header).

        Raises:
            TypeError: ``payload`` is not bytes-like.
            ConfigurationError: Invalid subject or reply, or a payload that starts with
                an envelope header (magic number, version 0) whose HeaderLen is beyond
                its length: the partition leader would crash on it (see
                :func:`~liftbridge_sync.envelope.check_raw_payload`).
            MessageTooLargeError: The payload is over the connected NATS server's
                ``max_payload`` (1 MiB by default); nothing is queued.
            AckTimeoutError: nats-py's buffer stayed full (NATS not reading) for the
                publisher's ``ack_timeout``.
            PublishQueueFullError: ``max_in_flight`` publishes were pending and no slot
                freed within the publisher's ``ack_timeout``.
            BrokerUnavailableError: No NATS connection.
            LocalResourceError: The process has no file descriptor left to connect.
            ClientClosedError: The publisher is closed.
            ForkedClientError: In a process forked after the publisher started.
            WrongThreadError: Called on the ``liftbridge-nats`` thread (a done-callback).

        Thread-safe.
        """
        self._handoff.forbid_loop_thread("publish_raw")
        checked_subject = check_publish_subject("subject", subject)
        checked_reply = "" if reply is None else check_publish_subject("reply", reply)
        data = check_raw_payload("payload", check_bytes("payload", payload))
        job = Job(
            kind="raw",
            future=concurrent.futures.Future(),
            subject=checked_subject,
            payload=data,
            reply=checked_reply,
            deadline=time.monotonic() + self._ack_timeout,
        )
        self._handoff.submit(job)
        self._wait_for(job.future, self._ack_timeout)

    def _wait_for(self, future: concurrent.futures.Future[Any], seconds: float) -> Any:
        """The outcome of a publish's future, waiting at most ``seconds`` plus a grace.

        The loop side fails the future at its deadline; the grace covers a writer held up
        by an earlier job with a later deadline. Past it the future is failed here, which
        also keeps its message from being written later.
        """
        try:
            # In slices: a Ctrl-C that did not wake the sleep is raised within one.
            return wait_future(future, seconds + _WAIT_GRACE)
        except concurrent.futures.TimeoutError:
            if future.done():
                raise  # the publish's own AckTimeoutError
        settle(future, error=AckTimeoutError("NATS did not take the message in time"))
        return future.result()  # our error, or the outcome that won the race

    def flush(self, timeout: float | None = None) -> None:
        """Wait until NATS has everything published so far and every publish resolved.

        Writes out queued messages, does a NATS PING/PONG round trip (so raw publishes
        have reached the server), then waits until every future returned by
        :meth:`publish_async` before this call has its ack or error.

        Args:
            timeout: Seconds to wait in all (``None`` or ``inf``: no limit besides the NATS flush
                taking at most 10 s, and each publish's own ack timeout). Both are kept
                by the ``liftbridge-nats`` thread: a done-callback that blocks it holds
                a flush without a timeout for as long, until :meth:`close` on another
                thread ends the wait with ``ClientClosedError``.

        Raises:
            TimeoutError: Not everything completed in time.
            BrokerUnavailableError: The NATS connection is lost.
            LocalResourceError: The process has no file descriptor left to connect.
            ClientClosedError: The publisher is closed, also while the flush waits.
            ForkedClientError: In a process forked after the publisher started.
            WrongThreadError: Called on the ``liftbridge-nats`` thread (a done-callback).

        Thread-safe.
        """
        self._handoff.refuse_if_forked()
        self._handoff.forbid_loop_thread("flush")
        seconds = check_timeout_arg("timeout", timeout, optional=True, unlimited=True)
        deadline = None if seconds is None else time.monotonic() + seconds
        waiting = self._handoff.outstanding()  # ClientClosedError once closed
        if not self._handoff.started:
            return  # nothing was ever published
        flush_limit = seconds if seconds is not None else DEFAULT_FLUSH_TIMEOUT
        marker = Job(kind="flush", future=concurrent.futures.Future(), deadline=flush_limit)
        self._handoff.submit(marker)
        try:
            wait_future(marker.future, seconds)  # in slices, as _wait_for
        except concurrent.futures.TimeoutError:  # ours, or the NATS flush's AckTimeoutError
            raise WaitTimeoutError(f"NATS flush did not complete within {flush_limit}s") from None
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        not_done = wait_all(waiting, remaining)
        if not_done:
            raise WaitTimeoutError(f"{len(not_done)} publishes still pending after {seconds}s")
        for future in waiting:
            # Failed by a close() on another thread meanwhile: not flushed, but given up.
            if not future.cancelled() and isinstance(future.exception(0), ClientClosedError):
                raise ClientClosedError("NatsPublisher was closed while the flush waited")

    def close(self, timeout: float = 5.0) -> None:
        """Flush pending NATS data, fail unresolved publishes and stop the thread.

        Queued messages are written and flushed to NATS (for at most ``timeout``
        seconds); publishes still waiting for an ack then fail with
        :class:`~liftbridge_sync.errors.ClientClosedError` (call :meth:`flush` first to
        wait for acks). The NATS connection is closed, within what is left of
        ``timeout`` (half a second at least: a server still not taking the data then has
        the connection cut), and the ``liftbridge-nats`` thread joined (for at most
        ``timeout`` + 10 s: a done-callback that blocks it is logged and left, and the
        publishes and flushes it kept from being settled fail then, on the caller's
        thread, with ``ClientClosedError``), and so are
        ``liftbridge-nats-dns`` threads resolving a host name (for at most ``timeout``).
        A first connection under way is given up: the publish waiting for it on another
        thread fails with ``ClientClosedError`` at once. Idempotent; later calls return
        after the first has finished (except on the ``liftbridge-nats`` thread itself,
        where the shutdown is only started). In a process forked after the publisher
        started it only marks the publisher closed: the thread and the connection are
        the parent's.

        Args:
            timeout: Seconds allowed for writing and flushing pending data.

        Thread-safe.
        """
        seconds = check_timeout_arg("timeout", timeout, optional=False)
        assert seconds is not None
        self._handoff.close(seconds)
