"""The client's publish calls below their signatures: fast path, general path, tracing.

The common case (a ``bytes`` value to a partition, nothing else, no telemetry) goes to
:meth:`Publisher.submit_value` at once; anything else is checked and framed by
:func:`submit`, which runs in a ``send`` span when OpenTelemetry is configured. The
callers' arguments are those of :class:`~liftbridge_sync.Client`'s methods, documented
there. Functions of the session they are given: thread-safe.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from liftbridge_sync._client.session import Session
from liftbridge_sync._publishing import batch_requests
from liftbridge_sync._publishing.publisher import Publisher
from liftbridge_sync._publishing.routing import (
    BatchChooser,
    choose_partition,
    resolve_ack_timeout,
)
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.retry import Budget
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.publish_codec import encode_publish, is_common_case
from liftbridge_sync._wire.requests import partition_of, publish_to_subject_request
from liftbridge_sync._wire.status import error_from_ack_error
from liftbridge_sync._wire.validate import check_bytes, check_optional_text, check_partition
from liftbridge_sync.errors import (
    AckTimeoutError,
    ArgumentTypeError,
    ConfigurationError,
    DeadlineExceededError,
    LiftbridgeError,
)
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.partitioners import Partitioner

__all__ = ["publish", "publish_async", "publish_batch", "publish_to_subject", "submit"]

#: One publish sent: its future, correlation id and partition (for its span).
Sent = tuple[concurrent.futures.Future[Ack | None], str, int]
#: Sends one publish given its (traced) headers.
Sender = Callable[[Mapping[str, bytes] | None], Sent]


def publish_async(
    session: Session,
    stream: str,
    value: bytes,
    key: bytes | None,
    partition: int | None,
    partitioner: Partitioner | None,
    headers: Mapping[str, bytes] | None,
    ack_policy: AckPolicy,
    expected_offset: int | None,
    correlation_id: str | None,
    timeout: float | None,
) -> concurrent.futures.Future[Ack | None]:
    """:meth:`Client.publish_async <liftbridge_sync.Client.publish_async>`."""
    if session.closed:
        session.check()
    # No pid check here (getpid() is a system call, a tenth of this call's cost): a
    # child made by os.fork() got a fresh client state from the at-fork hook already.
    publisher = session.publisher or session.get_publisher()
    # The codec's is_common_case, inlined: a call would cost a fifth of this path.
    if (
        session.telemetry is None
        and type(value) is bytes
        and key is None
        and partitioner is None
        and headers is None
        and expected_offset is None
        and correlation_id is None
        and type(stream) is str
        and type(ack_policy) is AckPolicy
    ):
        ack_timeout = session.options.ack_timeout
        return publisher.submit_value(
            stream,
            value,
            0 if partition is None else check_partition("partition", partition),
            ack_policy,
            ack_timeout if timeout is None else resolve_ack_timeout(timeout, ack_timeout),
        )
    return submit(
        session,
        publisher,
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
    session: Session,
    stream: str,
    value: bytes,
    key: bytes | None,
    partition: int | None,
    partitioner: Partitioner | None,
    headers: Mapping[str, bytes] | None,
    ack_policy: AckPolicy,
    expected_offset: int | None,
    correlation_id: str | None,
    timeout: float | None,
) -> Ack | None:
    """:meth:`Client.publish <liftbridge_sync.Client.publish>`."""
    session.check()
    publisher = session.publisher or session.get_publisher()
    publisher.check_can_wait()  # before anything is sent: no false failures
    if (
        session.telemetry is None
        and partitioner is None
        and correlation_id is None
        and is_common_case(stream, value, key, headers, ack_policy, expected_offset)
    ):
        ack_timeout = session.options.ack_timeout
        fast = publisher.submit_value(
            stream,
            value,
            0 if partition is None else check_partition("partition", partition),
            ack_policy,
            ack_timeout if timeout is None else resolve_ack_timeout(timeout, ack_timeout),
            direct=True,
        )
        return publisher.wait(fast, None, read_here=ack_policy is not AckPolicy.NONE)
    send = _sender(
        session,
        publisher,
        stream,
        value,
        key,
        partition,
        partitioner,
        ack_policy,
        expected_offset,
        correlation_id,
        timeout,
        direct=True,
    )
    read_here = ack_policy is not AckPolicy.NONE
    telemetry = session.telemetry
    if telemetry is None:
        # The future's own ack timer bounds this wait.
        return publisher.wait(send(headers)[0], None, read_here=read_here)
    # Its span ends before it returns (not in a done-callback that may still be running).
    return telemetry.trace_publish(
        stream, partition, headers, send, lambda f: publisher.wait(f, None, read_here=read_here)
    )


def submit(
    session: Session,
    publisher: Publisher,
    stream: str,
    value: bytes,
    key: bytes | None,
    partition: int | None,
    partitioner: Partitioner | None,
    headers: Mapping[str, bytes] | None,
    ack_policy: AckPolicy,
    expected_offset: int | None,
    correlation_id: str | None,
    timeout: float | None,
    direct: bool = False,
) -> concurrent.futures.Future[Ack | None]:
    """A publish beyond the common case: checked, framed and submitted, in its ``send``
    span with the trace context in its headers when tracing. ``direct``: the caller
    waits for the ack next (``publish``), so it writes on its own thread."""
    send = _sender(
        session,
        publisher,
        stream,
        value,
        key,
        partition,
        partitioner,
        ack_policy,
        expected_offset,
        correlation_id,
        timeout,
        direct,
    )
    telemetry = session.telemetry
    if telemetry is None:
        return send(headers)[0]
    return telemetry.trace_send(stream, partition, headers, send)


def _sender(
    session: Session,
    publisher: Publisher,
    stream: str,
    value: bytes,
    key: bytes | None,
    partition: int | None,
    partitioner: Partitioner | None,
    ack_policy: AckPolicy,
    expected_offset: int | None,
    correlation_id: str | None,
    timeout: float | None,
    direct: bool,
) -> Sender:
    """What checks, frames and submits one publish given its (traced) headers, and
    returns its future, correlation id and partition (for its span)."""

    def send(headers: Mapping[str, bytes] | None) -> Sent:
        correlation = correlation_id
        if correlation is None:
            correlation = publisher.next_correlation_id()
        else:
            if isinstance(correlation, str):
                # A plain str, before anything compares it: the pending table's keys are
                # compared without running Python code (the C fast path relies on it; a
                # subclass may define __eq__).
                correlation = str.__str__(correlation)
            # Non-empty (ArgumentTypeError for another type), valid UTF-8 for protobuf.
            check_optional_text("correlation_id", correlation)
        payload, routing_key = value, key
        if partition is None and partitioner is None:
            chosen = 0
        else:
            if partitioner is not None:  # it gets validated bytes
                payload = check_bytes("value", value)
                routing_key = check_bytes("key", key, optional=True)
            chosen = choose_partition(
                session.core, stream, routing_key, payload, partition, partitioner
            )
        framed = encode_publish(
            stream,
            payload,
            partition=chosen,
            key=routing_key,
            headers=headers,
            ack_policy=ack_policy,
            expected_offset=expected_offset,
            correlation_id=correlation,
        )
        future = publisher.submit(
            framed,
            correlation,
            partition=chosen,
            wants_ack=ack_policy is not AckPolicy.NONE,
            timeout=resolve_ack_timeout(timeout, session.options.ack_timeout),
            direct=direct,
        )
        return future, correlation, chosen

    return send


def publish_batch(
    session: Session,
    stream: str,
    messages: Iterable[Any],
    partition: int | None,
    partitioner: Partitioner | None,
    ack_policy: AckPolicy,
    timeout: float | None,
) -> list[Ack | None | LiftbridgeError]:
    """:meth:`Client.publish_batch <liftbridge_sync.Client.publish_batch>`, the items
    framed and sent by :func:`~liftbridge_sync._publishing.batch_requests.publish_batch`;
    traced per the messaging conventions for batches when tracing."""
    core = session.check()
    publisher = session.publisher or session.get_publisher()
    publisher.check_can_wait()  # before anything is sent: no false failures
    items: list[Any] = messages if type(messages) is list else _items(messages)
    ack_timeout = resolve_ack_timeout(timeout, session.options.ack_timeout)

    def send(
        batch: list[Any], framed: Callable[[], None] | None = None
    ) -> list[Ack | None | LiftbridgeError]:
        return batch_requests.publish_batch(
            publisher,
            stream,
            batch,
            partition=partition,
            partitioner=partitioner,
            choose=BatchChooser(core, stream, partition, partitioner),
            ack_policy=ack_policy,
            timeout=ack_timeout,
            framed=framed,
        )

    telemetry = session.telemetry
    if telemetry is None:
        return send(items)
    return telemetry.trace_batch(stream, partition, items, send)


def _items(messages: object) -> list[Any]:
    """The items of ``publish_batch``'s ``messages``, an iterable of them.

    Raises:
        ArgumentTypeError: ``messages`` is no iterable, is one value (``bytes``,
            ``str``...) whose elements would have been taken for the items, or is a
            mapping (whose keys alone would have been).
    """
    if isinstance(messages, bytes | bytearray | memoryview | str):
        raise ArgumentTypeError(
            f"'messages' must be an iterable of items, not {type(messages).__name__} "
            "(one message: [value])"
        )
    if isinstance(messages, Mapping):
        # Iterating a mapping gives its keys alone: each would go out as a value.
        raise ArgumentTypeError(
            f"'messages' must be an iterable of items, not a {type(messages).__name__} "
            "(its (key, value) pairs: messages.items())"
        )
    try:
        iterator = iter(messages)  # type: ignore[call-overload]
    except TypeError:
        raise ArgumentTypeError(
            f"'messages' must be an iterable of items, not {type(messages).__name__}"
        ) from None
    return list(iterator)


def publish_to_subject(
    session: Session,
    subject: str,
    value: bytes,
    key: bytes | None,
    headers: Mapping[str, bytes] | None,
    ack_policy: AckPolicy,
    ack_inbox: str | None,
    correlation_id: str | None,
    timeout: float | None,
) -> Ack | None:
    """:meth:`Client.publish_to_subject <liftbridge_sync.Client.publish_to_subject>`."""
    core = session.check()
    telemetry = session.telemetry if session.telemetry_made else session.get_telemetry()
    ack_timeout = resolve_ack_timeout(timeout, session.options.ack_timeout)

    def prepare(headers: Mapping[str, bytes] | None) -> Callable[[], Ack | None]:
        """Check the publish (before anything is sent); what sends it."""
        request = publish_to_subject_request(
            subject,
            value,
            key=key,
            headers=headers,
            ack_policy=ack_policy,
            ack_inbox=ack_inbox,
            correlation_id=correlation_id,
        )
        return lambda: _publish_to_subject(core, subject, request, ack_policy, ack_timeout)

    if telemetry is None:
        return prepare(headers)()
    return telemetry.trace_call(subject, headers, prepare, correlation_id)


def _publish_to_subject(
    core: ClientCore,
    subject: str,
    request: Any,
    ack_policy: AckPolicy,
    ack_timeout: float,
) -> Ack | None:
    """Send a ``PublishToSubject`` request; its first ack (``None``: AckPolicy.NONE).

    ``ack_timeout`` bounds the whole call: attempts and the back-off between them.
    """
    deadline = time.monotonic() + ack_timeout
    _refuse_reserved_subject(core, subject, deadline)
    try:
        response = core.call_any(
            rpcs.PUBLISH_TO_SUBJECT,
            request,
            timeout=ack_timeout,
            deadline=deadline,
        )
    except DeadlineExceededError as exc:
        raise AckTimeoutError(
            f"no ack for the message on {subject!r} within {ack_timeout}s",
            code=exc.code,
            details=exc.details,
        ) from None
    if ack_policy is AckPolicy.NONE or not response.HasField("ack"):
        return None
    ack = Ack.from_proto(response.ack, partition=partition_of(response.ack))
    if ack.ack_error is not None:
        raise error_from_ack_error(ack.ack_error)
    return ack


def _refuse_reserved_subject(core: ClientCore, subject: str, deadline: float) -> None:
    """Refuse ``subject`` if it is a subject of ``__cursors`` or ``__activity``.

    The server stores what is published there and reads it back as its own records (a
    cursor message can overwrite any cursor). Their subjects are ``<namespace>.cursors``
    and ``<namespace>.activity``: the namespace is read from whichever of the two the
    client's metadata lists (fetched within ``deadline`` if it has none yet).

    Raises:
        ConfigurationError: ``subject`` is one of theirs (a partition's too).
    """
    snapshot = core.metadata.get(Budget(deadline, deadline))
    for name, suffix in _RESERVED_SUFFIXES.items():
        info = snapshot.streams.get(name)
        if info is None or not info.subject.endswith(suffix):
            continue
        namespace = info.subject[: -len(suffix)]
        for reserved, own in _RESERVED_SUFFIXES.items():
            base = namespace + own
            if subject == base or subject.startswith(base + "."):
                raise ConfigurationError(
                    f"subject {subject!r} is the server's own stream {reserved!r}: it "
                    "would read what is published there as its own records"
                )
        return


#: The server's own streams and the ends of their subjects (after the namespace).
_RESERVED_SUFFIXES = {"__cursors": ".cursors", "__activity": ".activity"}
