"""Request building: public arguments in, validated protobuf requests out.

Every request the client sends is built here (subscriptions excepted: their positions
are pinned with RPCs, see ``subscription.opening``), so the client, the publisher and
the NATS publisher share one set of rules and raise the same error for the same
mistake. Pure functions that raise before any I/O: thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._wire.validate import (
    INT32_MAX,
    MAX_PARTITIONS,
    SERVER_MAX_REQUEST_BYTES,
    check_ack_policy,
    check_bool,
    check_bytes,
    check_headers,
    check_int,
    check_name,
    check_optional_text,
    check_partitions,
    check_publish_subject,
    check_stream_subject,
    check_subject,
    duration_ms,
)
from liftbridge_sync.errors import ConfigurationError, MessageTooLargeError
from liftbridge_sync.models import AckPolicy

__all__ = [
    "SERVER_MAX_REQUEST_BYTES",
    "check_request_size",
    "build_publish_request",
    "check_publish_stream",
    "create_stream_request",
    "delete_stream_request",
    "pause_stream_request",
    "set_stream_readonly_request",
    "partition_of",
    "publish_to_subject_request",
]


#: Stream names that passed validation: publishing checks each name once, not per message.
_valid_streams: set[str] = set()


def check_publish_stream(stream: object) -> str:
    """The name of a stream to publish to, checked as :func:`check_name` does; a name
    checked before is not checked again.

    The server's own streams (``__cursors``, ``__activity``) are refused: it stores
    what is published there, and reads it back as its own records (a cursor message
    could overwrite any cursor; a malformed one is logged at every start).

    Raises:
        ArgumentTypeError: not a ``str``.
        ConfigurationError: a name the server cannot hold.
    """
    if not isinstance(stream, str) or stream not in _valid_streams:
        checked = check_name("stream", stream)
        if len(_valid_streams) >= 4096:
            _valid_streams.clear()
        _valid_streams.add(checked)
        return checked
    return stream


def build_publish_request(
    stream: str,
    value: object,
    *,
    partition: int,
    key: object,
    headers: Mapping[str, bytes] | None,
    ack_policy: AckPolicy,
    expected_offset: int | None,
    correlation_id: str,
) -> api_pb2.PublishRequest:
    """Validate publish arguments and build the wire request (raises before any I/O)."""
    check_publish_stream(stream)
    payload = check_bytes("value", value)
    key_bytes = check_bytes("key", key, optional=True)
    check_ack_policy(ack_policy)
    if expected_offset is None:
        offset = -1  # "no check"; the proto default 0 would demand offset 0 on OCC streams
    else:
        offset = check_int("expected_offset", expected_offset, minimum=0)
        if ack_policy is AckPolicy.NONE:
            raise ConfigurationError(
                "expected_offset needs an ack: the server refuses AckPolicy.NONE on "
                "optimistic-concurrency streams"
            )
    request = api_pb2.PublishRequest(
        stream=stream,
        partition=partition,
        value=payload,
        key=key_bytes or b"",
        headers=check_headers(headers),
        ackPolicy=int(ack_policy),  # type: ignore[arg-type]
        expectedOffset=offset,
        correlationId=correlation_id,
    )
    # Its size is checked where it is framed (the publisher refuses a request over the
    # gRPC limit with MessageTooLargeError on every path, the fast one included).
    return request


#: Room for the partition and correlation id set after building (not yet in ByteSize).
_ID_ROOM = 128


def check_request_size(request: api_pb2.PublishRequest | api_pb2.PublishToSubjectRequest) -> None:
    """Refuse a request the server's gRPC layer would reject.

    Raises:
        MessageTooLargeError: with the size and the limit.
    """
    size = request.ByteSize() + _ID_ROOM
    if size > SERVER_MAX_REQUEST_BYTES:
        raise MessageTooLargeError(
            f"message is {size:,} bytes on the wire; the server accepts at most "
            f"{SERVER_MAX_REQUEST_BYTES:,} (value, key and headers together)",
            code="TOO_LARGE",
        )


def publish_to_subject_request(
    subject: str,
    value: object,
    *,
    key: object,
    headers: Mapping[str, bytes] | None,
    ack_policy: AckPolicy,
    ack_inbox: str | None,
    correlation_id: str | None,
) -> api_pb2.PublishToSubjectRequest:
    """Validate ``publish_to_subject`` arguments and build the wire request."""
    check_publish_subject("subject", subject)
    payload = check_bytes("value", value)
    key_bytes = check_bytes("key", key, optional=True)
    check_ack_policy(ack_policy)
    check_optional_text("ack_inbox", ack_inbox)
    check_optional_text("correlation_id", correlation_id)
    if ack_inbox is not None:
        check_publish_subject("ack_inbox", ack_inbox)
    request = api_pb2.PublishToSubjectRequest(
        subject=subject,
        value=payload,
        key=key_bytes or b"",
        headers=check_headers(headers),
        ackInbox=ack_inbox or "",
        correlationId=correlation_id or "",
        ackPolicy=int(ack_policy),  # type: ignore[arg-type]
    )
    check_request_size(request)
    return request


def partition_of(ack: api_pb2.Ack) -> int:
    """The partition an ack is for, from its subjects (``<subject>.<N>`` is partition N).

    The subjects come from the server: anything but ASCII digits of an int32 (``isdigit``
    alone admits digits ``int`` refuses, such as ``"²"``) gives -1, never an error.
    """
    if ack.msgSubject == ack.partitionSubject:
        return 0
    prefix = ack.partitionSubject + "."
    suffix = ack.msgSubject[len(prefix) :] if ack.msgSubject.startswith(prefix) else ""
    if not (suffix.isascii() and suffix.isdigit()) or len(suffix) > len(str(INT32_MAX)):
        return -1
    number = int(suffix)
    return number if number <= INT32_MAX else -1


def create_stream_request(
    *,
    subject: str,
    name: str,
    partitions: int,
    replication_factor: int,
    group: str | None,
    retention_max_bytes: int | None,
    retention_max_messages: int | None,
    retention_max_age: float | timedelta | None,
    cleaner_interval: float | timedelta | None,
    segment_max_bytes: int | None,
    segment_max_age: float | timedelta | None,
    compact_enabled: bool | None,
    compact_max_goroutines: int | None,
    auto_pause_time: float | timedelta | None,
    auto_pause_disable_if_subscribers: bool | None,
    min_isr: int | None,
    optimistic_concurrency_control: bool | None,
    encryption: bool | None,
) -> api_pb2.CreateStreamRequest:
    """Validate ``create_stream`` arguments and build the wire request."""
    name = check_name("name", name, creating=True)
    partitions = check_int("partitions", partitions, minimum=1, maximum=MAX_PARTITIONS)
    request = api_pb2.CreateStreamRequest(
        subject=check_stream_subject("subject", subject, partitions=partitions),
        name=name,
        partitions=partitions,
    )
    replication_factor = check_int(
        "replication_factor", replication_factor, minimum=-1, maximum=INT32_MAX
    )
    if replication_factor == 0:
        raise ConfigurationError("'replication_factor' must be >= 1, or -1 for every server")
    request.replicationFactor = replication_factor
    if group is not None:
        request.group = check_subject("group", group, carries_messages=False)

    def int64(field: str, value: int | None, minimum: int) -> None:
        if value is not None:
            getattr(request, _camel(field)).value = check_int(field, value, minimum=minimum)

    def int32(field: str, value: int | None, minimum: int) -> None:
        if value is not None:
            getattr(request, _camel(field)).value = check_int(
                field, value, minimum=minimum, maximum=INT32_MAX
            )

    def millis(field: str, value: float | timedelta | None, allow_zero: bool = True) -> None:
        # 0 means "no limit" / "never" to the server for every duration it may be.
        ms = duration_ms(field, value, allow_zero=allow_zero, inf_is_zero=allow_zero)
        if ms is not None:
            getattr(request, _camel(field)).value = ms

    def flag(field: str, value: bool | None) -> None:
        if value is not None:
            getattr(request, _camel(field)).value = check_bool(field, value)

    int64("retention_max_bytes", retention_max_bytes, 0)
    int64("retention_max_messages", retention_max_messages, 0)
    millis("retention_max_age", retention_max_age)
    # The server's cleaner is a ticker: a zero interval would crash it.
    millis("cleaner_interval", cleaner_interval, allow_zero=False)
    int64("segment_max_bytes", segment_max_bytes, 1)
    millis("segment_max_age", segment_max_age)
    flag("compact_enabled", compact_enabled)
    int32("compact_max_goroutines", compact_max_goroutines, 1)
    millis("auto_pause_time", auto_pause_time)
    flag("auto_pause_disable_if_subscribers", auto_pause_disable_if_subscribers)
    int32("min_isr", min_isr, 1)
    if min_isr is not None and replication_factor > 0 and min_isr > replication_factor:
        raise ConfigurationError(
            f"'min_isr' ({min_isr}) cannot exceed 'replication_factor' ({replication_factor})"
        )
    flag("optimistic_concurrency_control", optimistic_concurrency_control)
    flag("encryption", encryption)
    return request


def delete_stream_request(name: str) -> api_pb2.DeleteStreamRequest:
    """Validate a ``delete_stream`` name and build the wire request."""
    return api_pb2.DeleteStreamRequest(name=check_name("name", name))


def pause_stream_request(
    name: str, partitions: Iterable[int] | None, resume_all: bool
) -> api_pb2.PauseStreamRequest:
    """Validate ``pause_stream`` arguments and build the wire request."""
    return api_pb2.PauseStreamRequest(
        name=check_name("name", name),
        partitions=check_partitions("partitions", partitions),
        resumeAll=check_bool("resume_all", resume_all),
    )


def set_stream_readonly_request(
    name: str, partitions: Iterable[int] | None, readonly: bool
) -> api_pb2.SetStreamReadonlyRequest:
    """Validate ``set_stream_readonly`` arguments and build the wire request."""
    return api_pb2.SetStreamReadonlyRequest(
        name=check_name("name", name),
        partitions=check_partitions("partitions", partitions),
        readonly=check_bool("readonly", readonly),
    )


def _camel(snake: str) -> str:
    first, *rest = snake.split("_")
    return first + "".join(part.capitalize() for part in rest)
