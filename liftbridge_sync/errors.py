"""Exceptions raised by liftbridge-sync, and the one place that maps gRPC codes.

Every exception derives from :class:`LiftbridgeError`::

    LiftbridgeError
    ├── ConfigurationError (ValueError)      bad argument or option, caught before the wire
    │   ├── ArgumentTypeError (TypeError)    an argument of the wrong type
    │   └── WrongThreadError (RuntimeError)  a blocking call on the thread it would wait for
    ├── EnvelopeError (ValueError)           malformed Liftbridge NATS envelope
    ├── ClientClosedError                    the client (or subscription) was closed
    ├── ForkedClientError                    a connected client was used in a forked child
    ├── InternalThreadError                  a thread of the client died: it cannot go on
    ├── LocalResourceError                   this process is out of file descriptors
    ├── BrokerUnavailableError               no broker reachable (UNAVAILABLE, no metadata leader)
    │   └── TLSError                         TLS set-up failed: certificates, names, TLS vs plain
    ├── NotLeaderError                       request reached a broker that does not lead
    ├── DeadlineExceededError (TimeoutError) an RPC deadline expired
    ├── WaitTimeoutError (TimeoutError)      a call's own timeout ran out while it waited
    ├── StreamExistsError                    CreateStream: name already taken
    ├── NotFoundError
    │   ├── NoSuchStreamError
    │   │   └── ActivityStreamDisabledError  the server runs without the activity stream
    │   ├── NoSuchPartitionError
    │   ├── StreamDeletedError               stream deleted under a subscription
    │   └── ConsumerGroupNotFoundError       the consumer group does not exist (also below)
    ├── ConsumerGroupError                   consumer groups
    │   ├── ConsumerGroupNotFoundError       unknown group (also a NotFoundError)
    │   ├── CoordinatorMismatchError         not the group's coordinator, or a stale epoch
    │   ├── NotGroupMemberError              the consumer is not (or no longer) a member
    │   ├── ConsumerIdInUseError             join refused: the id is a member already (also
    │   │                                    a ServerError, as it was raised before)
    │   └── CommitError                      cursors of a commit not stored (the others were)
    ├── PartitionPausedError                 partition paused under a subscription
    ├── ReadonlyPartitionError               partition is read-only
    ├── PermissionDeniedError                server-side authorization refused the call
    ├── ServerError                          any other server status (INTERNAL, UNKNOWN, ...)
    │   ├── InvalidArgumentError             server refused an argument (INVALID_ARGUMENT)
    │   └── UnsupportedError                 the server lacks the RPC (UNIMPLEMENTED)
    └── PublishError
        ├── AckTimeoutError (TimeoutError)   no ack within the ack timeout
        ├── IncorrectOffsetError             optimistic concurrency: expected offset mismatch
        ├── PublishRejectedError             server refused the message (carries ``code``)
        │   └── MessageTooLargeError         over the server's 4 MiB limit (also a
        │                                    ConfigurationError: refused before the wire)
        ├── PublishQueueFullError            max_in_flight reached and enqueue timed out
        └── UnobservedPublishFailuresError   flush(): publishes failed and nobody looked

Errors produced from a gRPC status carry ``code`` (a :class:`grpc.StatusCode` name) and
``details`` (the server's message). Every error survives pickling, because Spark ships
exceptions between processes.

The one place that turns gRPC statuses and ``PublishAsync`` errors into these classes is
the private module ``liftbridge_sync._wire.status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AckTimeoutError",
    "ActivityStreamDisabledError",
    "ArgumentTypeError",
    "BrokerUnavailableError",
    "ClientClosedError",
    "CommitError",
    "ConfigurationError",
    "ConsumerGroupError",
    "ConsumerGroupNotFoundError",
    "ConsumerIdInUseError",
    "CoordinatorMismatchError",
    "DeadlineExceededError",
    "EnvelopeError",
    "ForkedClientError",
    "IncorrectOffsetError",
    "InternalThreadError",
    "InvalidArgumentError",
    "LiftbridgeError",
    "LocalResourceError",
    "MessageTooLargeError",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "NotFoundError",
    "NotGroupMemberError",
    "NotLeaderError",
    "PartitionPausedError",
    "PermissionDeniedError",
    "PublishError",
    "PublishQueueFullError",
    "PublishRejectedError",
    "ReadonlyPartitionError",
    "ServerError",
    "StreamDeletedError",
    "StreamExistsError",
    "TLSError",
    "UnobservedPublishFailuresError",
    "UnsupportedError",
    "WaitTimeoutError",
    "WrongThreadError",
]


def _rebuild(cls: type[LiftbridgeError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class LiftbridgeError(Exception):
    """Root of every exception raised by liftbridge-sync.

    Attributes:
        code: Name of the gRPC status code that caused the error (e.g. ``"NOT_FOUND"``),
            or ``None`` when the error did not come from a gRPC status.
        details: The server's status message, or ``""``.

    Instances are immutable values and safe to share between threads.
    """

    #: Whether retrying the same request may succeed (used by the retry policy).
    retryable: bool = False

    def __init__(self, message: str = "", *, code: str | None = None, details: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take keyword-only arguments, which the default exception pickling
        # cannot restore; rebuild from args and the instance dict instead.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class ConfigurationError(LiftbridgeError, ValueError):
    """An argument or option is invalid; raised before anything is sent."""


class ArgumentTypeError(ConfigurationError, TypeError):
    """An argument has the wrong type (e.g. a ``str`` payload); also a ``TypeError``."""


class WrongThreadError(ConfigurationError, RuntimeError):
    """A call was made on a thread it cannot run on: a blocking call on a thread of the
    library it would wait for (a future's done-callback on the ``liftbridge-nats``
    thread calling ``NatsPublisher.flush``), refused before anything is sent; or a read
    of a :class:`~liftbridge_sync.Subscription` while another thread reads it. Also a
    ``RuntimeError``, as it was before."""


class EnvelopeError(LiftbridgeError, ValueError):
    """Bytes are not a valid Liftbridge envelope; the message names the failed check."""


class ClientClosedError(LiftbridgeError):
    """The client, publisher or subscription was used after ``close()``."""


class ForkedClientError(LiftbridgeError):
    """A client that had connected in a parent process was used after ``fork()``.

    gRPC channels cannot cross a fork. Create the client in the child, or use
    ``Client.for_process(options)`` which keeps one client per process.
    """


class InternalThreadError(LiftbridgeError):
    """A thread of the client (named in the message) died from an unexpected error.

    This is a bug in liftbridge-sync, never the caller's fault. What that thread served
    (publishing, subscription timeouts) can no longer work: every later call that needs
    it raises this error, with the original one as ``__cause__``. Close the client and
    create a new one (and please report the traceback that was logged).

    ``subscribe_stream`` also raises it when a reader thread cannot be started (the
    process is out of threads or memory; ``RuntimeError`` as ``__cause__``): nothing of
    that subscription stays open, and the client is still usable. A consumer-group
    member's iterator raises it when its heartbeat thread died, e.g. because no thread
    could be started for a partition reader: close that consumer and create another;
    ``Client.consumer`` raises it when the member's own threads cannot be started (it
    has left the group again). A whole-stream subscription raises it once, at
    iteration, when one of its reader threads died so, and is closed.
    """


class LocalResourceError(LiftbridgeError):
    """A connection to a broker could not even be started: this process has no file
    descriptor left ("Too many open files", ``EMFILE``), or the system has none
    (``ENFILE``). The broker was never asked.

    Raised at once, not retried (nor blamed on the broker as a
    :class:`BrokerUnavailableError`): it lasts until the process closes files or
    sockets, or its limit (``ulimit -n``, ``RLIMIT_NOFILE``) is raised. With the default
    ``"h2"`` transports every publisher and every subscription holds a connection of
    its own, so a ``subscribe_stream`` of many partitions needs as many descriptors. The
    ``OSError`` is the ``__cause__`` (none when gRPC's own connect failed: a gRPC channel
    then reports it until its next attempt, at most 2 s later).

    Instances are immutable values and safe to share between threads.
    """


class BrokerUnavailableError(LiftbridgeError):
    """No broker could serve the request (UNAVAILABLE, or no metadata leader yet)."""

    retryable = True


class TLSError(BrokerUnavailableError):
    """The connection to a broker failed its TLS set-up; retrying cannot help.

    Raised at once, not after retries, since a configuration problem on one side or
    the other does not go away by itself. The message names the cause and the fix;
    ``reason`` names it for programs:

    * ``"client_certificate_required"``: the broker requires a client certificate
      (mutual TLS) and the client sent none.
    * ``"client_certificate_rejected"``: the broker refused the client certificate
      (not signed by a CA it trusts, expired, ...).
    * ``"client_certificate_missing_or_rejected"``: one of the two above; gRPC's status
      does not say which (the client's own TLS pre-flight usually does first).
    * ``"server_certificate_untrusted"``: the broker's certificate is not signed by
      ``TLSOptions.ca_cert`` (or, without it, a CA of the system store).
    * ``"strict_x509_verification"``: the broker's certificate chain fails strict
      X.509 verification (Python's default from 3.13 on), e.g. a CA certificate without
      ``keyUsage``.
    * ``"server_name_mismatch"``: the broker's certificate is not valid for the address
      (or ``TLSOptions.server_name``).
    * ``"server_requires_tls"``: the client speaks plaintext to a broker that only
      speaks TLS (the broker closed the connection at once).
    * ``"server_not_tls"``: the client speaks TLS to a plaintext broker.
    * ``"handshake_failed"``: any other TLS failure.

    Attributes:
        reason: One of the strings above.

    Instances are immutable values and safe to share between threads.
    """

    retryable = False

    def __init__(
        self,
        message: str = "",
        *,
        reason: str = "handshake_failed",
        code: str | None = None,
        details: str = "",
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.reason = reason


class NotLeaderError(LiftbridgeError):
    """The broker that received the request does not lead the partition."""

    retryable = True


class DeadlineExceededError(LiftbridgeError, TimeoutError):
    """The RPC's deadline expired before the server answered."""


class WaitTimeoutError(LiftbridgeError, TimeoutError):
    """A blocking call's own ``timeout`` ran out while it waited: no message or no
    assignment arrived, or publishes are still pending at a flush. Nothing failed: the
    subscription, consumer or publisher stays usable and the call may be repeated.
    A ``TimeoutError``, as these calls have always raised."""


class StreamExistsError(LiftbridgeError):
    """A stream with this name already exists."""


class NotFoundError(LiftbridgeError):
    """Base class of the "does not exist" errors."""


class NoSuchStreamError(NotFoundError):
    """The stream does not exist."""


class ActivityStreamDisabledError(NoSuchStreamError):
    """The server has no activity stream (``__activity``) to read.

    It runs without ``activity.stream.enabled: true`` (a setting of its configuration
    file; there is no command-line flag), or its cluster elected no metadata leader, which
    creates the stream, within the time ``Client.activity`` waited.
    """


class NoSuchPartitionError(NotFoundError):
    """The stream or the partition does not exist."""


class StreamDeletedError(NotFoundError):
    """The stream was deleted while it was being read."""


class ConsumerGroupError(LiftbridgeError):
    """Base class of the consumer-group errors."""


class ConsumerGroupNotFoundError(ConsumerGroupError, NotFoundError):
    """The consumer group does not exist (its last member left or expired)."""


class CoordinatorMismatchError(ConsumerGroupError):
    """The request reached a broker that is not the group's coordinator, or named an
    epoch that is no longer the group's (the assignments or the coordinator changed).

    A consumer recovers by reading the group's metadata again; ``Consumer`` does so.
    """


class NotGroupMemberError(ConsumerGroupError):
    """The consumer is not a member of the group (it left, or the server expired it)."""


class CommitError(ConsumerGroupError):
    """A consumer's commit could not store the cursors of some partitions.

    Each partition's cursor is stored on its own: one whose ``__cursors`` leader hung or
    was unreachable does not hold back the others, which were committed.

    Attributes:
        failed: The error of each partition whose cursor was not stored, per
            ``(stream, partition)``.
        committed: The offsets this commit did store, per ``(stream, partition)``.

    Instances are immutable values and safe to share between threads.
    """

    def __init__(
        self,
        message: str = "",
        *,
        failed: dict[tuple[str, int], LiftbridgeError] | None = None,
        committed: dict[tuple[str, int], int] | None = None,
        code: str | None = None,
        details: str = "",
    ) -> None:
        failed = dict(failed or {})
        if not message:
            named = ", ".join(f"{s}/{p}: {e}" for (s, p), e in sorted(failed.items()))
            message = f"the cursors of {len(failed)} partition(s) were not stored ({named})"
        super().__init__(message, code=code, details=details)
        self.failed = failed
        self.committed = dict(committed or {})


class PartitionPausedError(LiftbridgeError):
    """The partition was paused while it was being read."""


class ReadonlyPartitionError(LiftbridgeError):
    """The partition is read-only: publishes are refused."""


class PermissionDeniedError(LiftbridgeError):
    """The server's authorization (ACLs on the client certificate's CN) refused the call.

    Attributes:
        operation: The RPC the server checked (e.g. ``"CreateStream"``, ``"Publish"``),
            or ``None`` if its message did not say.
        resource: The stream (the subject for ``PublishToSubject``, ``"*"`` for
            ``FetchMetadata``), or ``None`` if its message did not say.

    Instances are immutable values and safe to share between threads.
    """

    def __init__(
        self,
        message: str = "",
        *,
        operation: str | None = None,
        resource: str | None = None,
        code: str | None = None,
        details: str = "",
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.operation = operation
        self.resource = resource


class ServerError(LiftbridgeError):
    """The server answered with a status that has no more specific class."""


class InvalidArgumentError(ServerError, ValueError):
    """The server refused an argument (INVALID_ARGUMENT)."""


class UnsupportedError(ServerError):
    """The server does not implement this RPC (it is older than the feature)."""


class ConsumerIdInUseError(ConsumerGroupError, ServerError):
    """A join was refused: the group already has a member with this ``consumer_id``.

    Another live member uses the id, or one that used it ended without leaving (its
    process killed) and the server has not expired it yet: it does so once the member
    has not polled for the server's consumer timeout (``groups.consumer.timeout``, 15 s
    by default). Give each member its own ``consumer_id`` (or none: one is generated),
    or join again after that timeout. The refused consumer started no thread and holds
    nothing; the member that has the id is not disturbed.

    Also a :class:`ServerError`, as which this refusal was raised before it had a class.

    Attributes:
        group: The group id, or ``None`` if not known (a status mapped on its own).
        consumer_id: The id refused, or ``None`` if not known.

    Instances are immutable values and safe to share between threads.
    """

    def __init__(
        self,
        message: str = "",
        *,
        group: str | None = None,
        consumer_id: str | None = None,
        code: str | None = None,
        details: str = "",
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.group = group
        self.consumer_id = consumer_id


class PublishError(LiftbridgeError):
    """Base class of errors that fail a publish."""


class AckTimeoutError(PublishError, TimeoutError):
    """No ack arrived within the ack timeout; the message may or may not be stored."""


class IncorrectOffsetError(PublishError):
    """Optimistic concurrency control: the message's expected offset did not match."""


class PublishRejectedError(PublishError):
    """The server refused the message.

    ``code`` is the name of the ``PublishAsyncError`` code (``"BAD_REQUEST"``,
    ``"ENCRYPTION_FAILED"``, ``"INTERNAL"``, ``"UNKNOWN"``) or of the ack error
    (``"TOO_LARGE"``, ``"ENCRYPTION"``) that caused it.
    """


class MessageTooLargeError(ConfigurationError, PublishRejectedError):
    """The encoded request exceeds the server's 4 MiB gRPC message limit (for a
    :class:`~liftbridge_sync.nats.NatsPublisher`, the NATS server's ``max_payload``);
    never sent.

    Raised by ``publish``/``publish_async``, and by ``publish_batch`` for the whole batch
    (no message of it sent), before the wire (the server would otherwise end the whole
    publish stream, failing the messages queued beside it). ``code`` is
    ``"TOO_LARGE"``.
    """


class PublishQueueFullError(PublishError):
    """``max_in_flight`` publishes are pending and no slot freed within the enqueue timeout
    (for a :class:`~liftbridge_sync.nats.NatsPublisher`, within the publish's timeout)."""


class UnobservedPublishFailuresError(PublishError):
    """``flush()`` found publishes that failed and that nobody can look at any more.

    A failure counts as unobserved once its future was dropped (garbage-collected)
    without its ``result()`` or ``exception()`` having been called (``publish()`` and
    ``publish_batch()`` do so themselves; a done-callback that inspects the future does
    too), as asyncio reports an exception that was never retrieved. A failed future
    still held somewhere is not counted: its holder may yet look. Failures are reported
    by one ``flush()`` only, then forgotten.

    Attributes:
        count: How many failed publishes were dropped unobserved since the previous flush.
        errors: The first of their errors (at most 10), in the order they failed.
    """

    def __init__(
        self,
        message: str = "",
        *,
        count: int = 0,
        errors: Sequence[BaseException] = (),
        code: str | None = None,
        details: str = "",
    ) -> None:
        if not message:
            first = f"; first: {type(errors[0]).__name__}: {errors[0]}" if errors else ""
            message = f"{count} publish(es) failed since the last flush, unobserved{first}"
        super().__init__(message, code=code, details=details)
        self.count = count
        self.errors = list(errors)
