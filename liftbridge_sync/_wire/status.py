"""The one place that turns gRPC statuses and PublishAsync errors into exceptions.

:func:`error_from_status` is the only function that interprets a gRPC status code; its
siblings :func:`error_from_async_error` and :func:`error_from_ack_error` do the same for
the per-message failures of ``PublishAsync``. Callers say in which :class:`CallContext`
a status arrived, since the same code means different things on different RPCs
(NOT_FOUND is a missing stream for DeleteStream but a deleted stream in the middle of a
subscription). :func:`error_from_tls_exception` classifies the ``ssl`` errors of a
handshake made by this package itself (the TLS pre-flight of
``_transport.channels``) with the same causes as the gRPC statuses.

TLS failures reach us from gRPC as UNAVAILABLE with the C-core's last connection error
in the details; :func:`_tls_error` turns those into a non-retryable
:class:`~liftbridge_sync.errors.TLSError` naming the cause, instead of a
:class:`~liftbridge_sync.errors.BrokerUnavailableError` that is retried for seconds.
Pure functions: thread-safe.
"""

from __future__ import annotations

import enum
import re
import ssl
from collections.abc import Callable, Iterable

import grpc

from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ConsumerGroupNotFoundError,
    ConsumerIdInUseError,
    CoordinatorMismatchError,
    DeadlineExceededError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LiftbridgeError,
    LocalResourceError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotGroupMemberError,
    NotLeaderError,
    PartitionPausedError,
    PermissionDeniedError,
    PublishRejectedError,
    ReadonlyPartitionError,
    ServerError,
    StreamDeletedError,
    StreamExistsError,
    TLSError,
    UnsupportedError,
)

__all__ = [
    "plaintext_refused_error",
    "CallContext",
    "error_from_ack_error",
    "error_from_async_error",
    "error_from_rpc_error",
    "error_from_status",
    "error_from_tls_exception",
    "closed_at_connect",
    "group_created_meanwhile",
    "is_transient_async_error",
    "maybe_carried_out",
]


class CallContext(enum.Enum):
    """Where a gRPC status arrived; decides what an ambiguous code means.

    Each value starts the messages of errors from that context, so it is worded for users,
    not after internal call names.
    """

    #: Any unary RPC not listed below (metadata, publish to subject, ...).
    GENERIC = "request"
    #: CreateStream.
    CREATE_STREAM = "create stream"
    #: DeleteStream.
    DELETE_STREAM = "delete stream"
    #: PauseStream, SetStreamReadonly: NOT_FOUND may be stream or partition.
    STREAM_ADMIN = "stream admin"
    #: RPCs that must reach a partition leader (FetchPartitionMetadata, cursors).
    LEADER = "partition request"
    #: Opening a subscription (before the server's handshake message).
    SUBSCRIBE_OPEN = "subscribe"
    #: A status that ended an established subscription.
    SUBSCRIPTION = "subscription"
    #: Consumer-group RPCs (join, leave, fetch assignments, report coordinator).
    GROUP = "consumer group"


#: What v1.9.0's log reader answers when it meets a segment that a roll, compaction or
#: retention is closing or replacing (server/commitlog: ErrSegmentClosed,
#: ErrSegmentReplaced, ErrSegmentNotFound and ErrEntryNotFound from a segment list read
#: mid-swap, "no segment to consume"). Before the handshake it is INTERNAL "Failed to
#: create stream reader: ..."; on a running stream UNKNOWN ("failed to reinitialize
#: reader: segment has been closed"). The same request succeeds once the cleaner has
#: swapped the segments, a moment later.
_READER_IN_TRANSITION_HINTS = (
    "segment has been closed",
    "segment was replaced",
    "segment not found",
    "entry not found",
    "no segment to consume",
)
#: The RESOURCE_EXHAUSTED texts by which v1.9.0 says a subscription has nothing more to
#: read (server/partition.go): a read-only partition read to its end, the stop offset
#: delivered, STOP_LATEST on an empty partition. Any other RESOURCE_EXHAUSTED (grpcio's
#: "Received message larger than max", an HTTP/2 ENHANCE_YOUR_CALM) is a failure.
_SUBSCRIPTION_END_HINTS = ("end of readonly partition", "stop offset reached", "stream is empty")
_NOT_LEADER_HINTS = ("not partition leader", "not leader", "partition leader", "not cursor")
_NO_METADATA_LEADER_HINTS = ("no known metadata leader", "no leader")


def _contains(details: str, hints: tuple[str, ...]) -> bool:
    lowered = details.lower()
    return any(hint in lowered for hint in hints)


_CLIENT_CERT_FIX = (
    "the broker requires a client certificate signed by a CA it trusts (mutual TLS): "
    "set TLSOptions(client_cert=..., client_key=...) to one it accepts"
)
#: What to tell the user, per ``TLSError.reason``.
_TLS_CAUSES: dict[str, str] = {
    "client_certificate_required": (
        "the broker requires a client certificate (mutual TLS) and none was sent: "
        "set TLSOptions(client_cert=..., client_key=...)"
    ),
    "client_certificate_rejected": (
        "the broker rejected the client certificate (unknown CA, expired or not for "
        "client authentication); " + _CLIENT_CERT_FIX
    ),
    "client_certificate_missing_or_rejected": (
        "the broker closed the connection right after the TLS handshake: the client sent "
        "no certificate or one the broker does not accept; " + _CLIENT_CERT_FIX
    ),
    "server_certificate_untrusted": (
        "the broker's certificate is not signed by a trusted CA: set TLSOptions(ca_cert=...) "
        "to the CA that signed it"
    ),
    "strict_x509_verification": (
        "the broker's certificate chain fails strict X.509 verification (VERIFY_X509_STRICT, "
        "Python's default from 3.13 on), although its CA may be trusted: a certificate "
        "lacks an extension RFC 5280 requires (a CA needs a critical basicConstraints, "
        "keyUsage with keyCertSign and a subjectKeyIdentifier; a certificate issued by it "
        "an authorityKeyIdentifier); reissue the certificates with them"
    ),
    "server_name_mismatch": (
        "the broker's certificate is not valid for the name connected to: connect by a "
        "name or IP address in its subjectAltName, or set TLSOptions(server_name=...)"
    ),
    "server_requires_tls": (
        "the broker closed the plaintext connection at once: it most likely requires TLS "
        "(set ClientOptions.tls / Client(tls=TLSOptions(...))), or a proxy in front of it "
        "refused the connection"
    ),
    "server_not_tls": (
        "the broker does not speak TLS (plaintext server): leave out ClientOptions.tls"
    ),
    "handshake_failed": "the TLS handshake failed",
}

#: Substrings of gRPC's connection errors, first match wins: (hint, reason).
#: ``Unwrap failed (TSI_DATA_CORRUPTED)`` is what gRPC reports when the server's alert
#: (certificate required / unknown CA) arrives after the client finished a TLS 1.3
#: handshake; the alert itself only goes to the C-core's log, so both client-certificate
#: causes look the same here (the pre-flight in ``_transport.channels`` tells them apart).
_GRPC_TLS_HINTS: tuple[tuple[str, str], ...] = (
    ("certificate_required", "client_certificate_required"),
    ("alert_unknown_ca", "client_certificate_rejected"),
    ("alert_bad_certificate", "client_certificate_rejected"),
    ("tsi_data_corrupted", "client_certificate_missing_or_rejected"),
    ("hostname verification", "server_name_mismatch"),
    ("peer name", "server_name_mismatch"),
    ("wrong_version_number", "server_not_tls"),
    ("certificate_verify_failed", "server_certificate_untrusted"),
    ("tls handshake failed", "handshake_failed"),
    ("handshake failed", "handshake_failed"),
    ("handshake read failed", "handshake_failed"),
    ("tsi_", "handshake_failed"),
    ("ssl_error", "handshake_failed"),
)
#: A plaintext connection the broker closed before HTTP/2 started (not a broken stream,
#: which reads just "Socket closed" without the connect prefix).
_CLOSED_AT_CONNECT = re.compile(r"failed to connect to all addresses.*socket closed", re.I | re.S)


def _tls_message(reason: str, where: str, detail: str) -> str:
    return f"{where}: TLS failure: {_TLS_CAUSES[reason]} ({detail})"


def plaintext_refused_error(where: str, details: str, *, verified: bool) -> BrokerUnavailableError:
    """A plaintext connection the broker ended before any valid HTTP/2 frame, while its
    port answers a TLS handshake: most likely a TLS-only broker.

    That is what a TLS-only broker does with a plaintext client (our own HTTP/2
    transports see it as a closed connection or garbage where SETTINGS should be).

    Args:
        where: What was connecting (``"publish"``).
        details: How the connection ended.
        verified: The TLS answer came with a certificate valid for the broker's
            address from a CA of the system store. Only then is the error a
            non-retryable :class:`TLSError`; an unverified answer could come from
            anything on the path (or a broker restarting with other settings), so it
            stays a retryable error that names the likely cause.
    """
    reason = "server_requires_tls"
    if verified:
        return TLSError(
            _tls_message(reason, where, details), reason=reason, code="UNAVAILABLE", details=details
        )
    return BrokerUnavailableError(
        f"{where}: broker unavailable: the plaintext connection was closed before HTTP/2 "
        f"started, and the broker's port answers a TLS handshake (with a certificate not "
        f"verified): if it requires TLS, set ClientOptions.tls / Client(tls=TLSOptions(...)) "
        f"({details})",
        code="UNAVAILABLE",
        details=details,
    )


def _tls_error(code_name: str, details: str, where: str) -> TLSError | None:
    """A :class:`TLSError` if a gRPC connection error is a TLS failure, else None."""
    lowered = details.lower()
    for hint, reason in _GRPC_TLS_HINTS:
        if hint in lowered:
            return TLSError(
                _tls_message(reason, where, details), reason=reason, code=code_name, details=details
            )
    # A plaintext connection closed at connect is *not* decided here: a broker that
    # requires TLS does that, but so does one restarting, or anything on the path. The
    # transport asks the port for a verified TLS answer first (closed_at_connect).
    return None


def closed_at_connect(details: str) -> bool:
    """Whether a gRPC status says a plaintext connection was closed before HTTP/2
    started: what a TLS-only broker does to a plaintext client, among other causes."""
    return bool(_CLOSED_AT_CONNECT.search(details))


#: gRPC's words for a call that never left the client (nothing was carried out).
_NEVER_SENT = ("failed to connect", "connection refused", "dns resolution", "name resolution")
#: What a server that timed out internally says, as INTERNAL or UNKNOWN (Go's
#: ``context.DeadlineExceeded`` of its forward to the metadata leader or of the Raft
#: apply): the request may have been applied after its context ran out.
_TIMED_OUT_INSIDE = ("deadline exceeded",)


def maybe_carried_out(failed: Iterable[LiftbridgeError]) -> LiftbridgeError | None:
    """The first failed attempt of a call, among ``failed``, that may have reached a
    broker and been carried out (its answer lost: a connection that broke mid-call, a
    deadline), or None: what tells a retried call that is not idempotent ("already
    exists", "already a member") from one that met someone else's work, and a failed
    join that must leave the group (it may have joined).

    A server's own deadline counts too (INTERNAL or UNKNOWN "... deadline exceeded"):
    it gave up waiting for work that may still have been applied."""
    for error in failed:
        if isinstance(error, DeadlineExceededError):
            return error
        details = (error.details or str(error)).lower()
        if error.code in ("INTERNAL", "UNKNOWN") and any(w in details for w in _TIMED_OUT_INSIDE):
            return error
        if error.retryable and not (
            closed_at_connect(error.details or "") or any(w in details for w in _NEVER_SENT)
        ):
            return error
    return None


#: OpenSSL reason codes of ``ssl.SSLError`` (``exc.reason``) to causes.
_SSL_REASONS: dict[str, str] = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "client_certificate_required",
    "TLSV1_ALERT_UNKNOWN_CA": "client_certificate_rejected",
    "SSLV3_ALERT_BAD_CERTIFICATE": "client_certificate_rejected",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "client_certificate_rejected",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": "client_certificate_rejected",
    "TLSV1_ALERT_DECRYPT_ERROR": "client_certificate_rejected",
    "WRONG_VERSION_NUMBER": "server_not_tls",
    "RECORD_LAYER_FAILURE": "server_not_tls",
    "PACKET_LENGTH_TOO_LONG": "server_not_tls",
    "HTTP_REQUEST": "server_not_tls",
}


#: OpenSSL verify codes (``X509_V_ERR_*``) that only strict X.509 verification
#: (``X509_V_FLAG_X509_STRICT``) raises: SIGNATURE_ALGORITHM_MISMATCH and
#: PATHLEN_INVALID_FOR_NON_CA (80) to EC_KEY_EXPLICIT_PARAMS (94), among them
#: CA_CERT_MISSING_KEY_USAGE (92) and MISSING_AUTHORITY/SUBJECT_KEY_IDENTIFIER (85/86).
_STRICT_ONLY_VERIFY_CODES = frozenset({77, *range(80, 95)})


def error_from_tls_exception(
    address: str,
    error: ssl.SSLError,
    *,
    strict: bool = False,
    system_roots: bool = False,
    issuer: str | None = None,
) -> TLSError:
    """Classify the ``ssl`` error of a handshake this package made itself.

    Args:
        address: ``host:port`` of the broker.
        error: What ``ssl`` raised during the handshake or the first read after it (a
            TLS 1.3 server sends its verdict on the client certificate only then).
        strict: The context verified with ``VERIFY_X509_STRICT``: a failure only that
            mode raises (by OpenSSL's verify code) is named as such.
        system_roots: The roots were the system store (no ``ca_cert``); the message
            says so.
        issuer: The issuer the broker's certificate names (unverified), if known; the
            message of an untrusted certificate shows it.

    Returns:
        The :class:`TLSError` to raise, naming the cause.
    """
    where = f"TLS to {address}"
    detail = str(error)
    if isinstance(error, ssl.SSLCertVerificationError):
        text = (error.verify_message or detail).lower()
        if strict and error.verify_code in _STRICT_ONLY_VERIFY_CODES:
            reason = "strict_x509_verification"
        elif "mismatch" in text:
            reason = "server_name_mismatch"
        else:
            reason = "server_certificate_untrusted"
    else:
        reason = _SSL_REASONS.get(str(error.reason or ""), "handshake_failed")
    message = _tls_message(reason, where, detail)
    if reason == "server_certificate_untrusted":
        if issuer:
            message += f"; the broker's certificate says it was issued by {issuer!r}"
        if system_roots:
            message += (
                "; ca_cert is not set, so the trusted CAs were the system store's "
                "(SSL_CERT_FILE and SSL_CERT_DIR choose another)"
            )
    return TLSError(message, reason=reason, details=detail)


_DENIED = re.compile(r"not authorized to call (\S+) on resource (\S*)", re.I)


def _permission_denied(where: str, details: str, code: str) -> PermissionDeniedError:
    """A :class:`PermissionDeniedError` naming the refused operation and stream, if known."""
    match = _DENIED.search(details)
    if match is None:
        return PermissionDeniedError(
            f"{where}: permission denied: {details or code}", code=code, details=details
        )
    operation, resource = match.group(1), match.group(2)
    what = "all streams" if resource == "*" else f"{resource!r}"
    return PermissionDeniedError(
        f"{where}: permission denied: the server's ACL does not allow this client "
        f"certificate's identity to call {operation} on {what} ({details})",
        operation=operation,
        resource=resource,
        code=code,
        details=details,
    )


#: How gRPC's C-core words a failed ``socket()`` for want of a descriptor ("socket: Too
#: many open files", "... in system"), lower-cased: its own call, never a server's text.
_OUT_OF_DESCRIPTORS = "socket: too many open files"


def error_from_status(
    code: grpc.StatusCode, details: str, context: CallContext = CallContext.GENERIC
) -> LiftbridgeError:
    """Turn a gRPC status into the matching :class:`LiftbridgeError`.

    This is the only place where status codes are interpreted.

    Args:
        code: The status code of the failed call.
        details: The status message the server sent.
        context: Where the status arrived.

    Returns:
        The exception to raise (not raised here). Its ``retryable`` flag tells the retry
        policy whether the same request may succeed on another attempt.
    """
    name = code.name
    text = details or name
    where = context.value

    def make(cls: type[LiftbridgeError], message: str | None = None) -> LiftbridgeError:
        return cls(message or f"{where}: {text}", code=name, details=details)

    sc = grpc.StatusCode
    if code is sc.UNAVAILABLE:
        tls_error = _tls_error(name, details, where)
        if tls_error is not None:
            return tls_error
        if _OUT_OF_DESCRIPTORS in text.lower():
            # gRPC's own socket() failed (EMFILE, ENFILE): this process's shortage, which
            # no retry cures and no broker caused.
            return make(
                LocalResourceError,
                f"{where}: this process has no file descriptor left for a connection "
                f"({text.splitlines()[0]}); close connections it no longer needs or raise "
                "its open-file limit (ulimit -n)",
            )
        return make(BrokerUnavailableError, f"{where}: broker unavailable: {text}")
    if code is sc.DEADLINE_EXCEEDED:
        return make(DeadlineExceededError, f"{where}: deadline exceeded: {text}")
    if code is sc.ALREADY_EXISTS:
        return make(StreamExistsError)
    if code in (sc.PERMISSION_DENIED, sc.UNAUTHENTICATED):
        return _permission_denied(where, details, name)
    if code is sc.UNIMPLEMENTED:
        return make(UnsupportedError, f"{where}: the server does not support this RPC: {text}")
    if code is sc.INVALID_ARGUMENT:
        return make(InvalidArgumentError)

    if context is CallContext.GROUP:
        group_error = _group_error(code, text, make)
        if group_error is not None:
            return group_error
    if (
        context is CallContext.SUBSCRIBE_OPEN
        and code is sc.FAILED_PRECONDITION
        and "not currently assigned" in text.lower()
    ):
        # A consumer-group member with an older epoch than the partition's current one.
        return make(CoordinatorMismatchError)

    if code is sc.NOT_FOUND:
        if context is CallContext.SUBSCRIPTION:
            return make(StreamDeletedError)
        if context is CallContext.DELETE_STREAM:
            return make(NoSuchStreamError)
        if context is CallContext.STREAM_ADMIN and "partition" not in text.lower():
            return make(NoSuchStreamError)
        return make(NoSuchPartitionError)

    if code is sc.FAILED_PRECONDITION:
        if context is CallContext.SUBSCRIPTION:
            return make(PartitionPausedError)
        if context in (CallContext.SUBSCRIBE_OPEN, CallContext.LEADER) or _contains(
            text, _NOT_LEADER_HINTS
        ):
            return make(NotLeaderError)
        if "readonly" in text.lower() or "read-only" in text.lower():
            return make(ReadonlyPartitionError)
        return make(ServerError)

    if code is sc.RESOURCE_EXHAUSTED:
        subscribing = context in (CallContext.SUBSCRIBE_OPEN, CallContext.SUBSCRIPTION)
        if subscribing and _contains(text, _SUBSCRIPTION_END_HINTS):
            # "No more data will come": the subscription ends its iteration on this class.
            return make(ReadonlyPartitionError)
        if subscribing and "larger than max" in text.lower():
            # Not MessageTooLargeError: that one is a publish refused before the wire.
            return make(
                ServerError,
                f"{where}: a message is larger than the limit: {text} (raise it with the "
                "option max_receive_message_size)",
            )
        if "larger than max" in text.lower():
            # Not MessageTooLargeError either: the request was sent (a publish over the
            # limit never is), and either it or its answer was over a gRPC limit.
            return make(
                ServerError,
                f"{where}: a request or its answer is larger than gRPC's limit: {text} "
                "(requests: 4 MiB on the server; answers: the option "
                "max_receive_message_size)",
            )
        return make(ServerError)

    if code is sc.UNKNOWN and "not authorized" in text.lower():
        return _permission_denied(where, details, name)

    if (
        context in (CallContext.SUBSCRIBE_OPEN, CallContext.SUBSCRIPTION)
        and code in (sc.INTERNAL, sc.UNKNOWN)
        and _contains(text, _READER_IN_TRANSITION_HINTS)
    ):
        error = make(
            ServerError,
            f"{where}: the server's log reader met a segment being rolled, compacted or "
            f"deleted: {text}",
        )
        error.retryable = True  # transient: retried within the (re)subscribe policy
        return error

    if code is sc.INTERNAL and _contains(text, _NO_METADATA_LEADER_HINTS):
        return make(BrokerUnavailableError, f"{where}: no metadata leader yet: {text}")

    if code is sc.INTERNAL and "cursors stream does not exist" in text.lower():
        return make(
            ServerError,
            f"{where}: {text} (the server runs with cursors disabled; "
            "set cursors.stream.partitions > 0 in its configuration)",
        )

    return make(ServerError)


#: FAILED_PRECONDITION texts of the consumer-group RPCs (server groups.go, metadata.go).
_NOT_MEMBER_HINTS = ("not a member",)
#: JoinConsumerGroup's ErrConsumerAlreadyMember (metadata.go, v1.8.0 to HEAD).
_ALREADY_MEMBER_HINTS = ("already a member",)
_NO_GROUP_HINTS = ("no such consumer group", "group does not exist")
_MISMATCH_HINTS = ("not the consumer group coordinator", "epoch", "generation mismatch")


#: JoinConsumerGroup's ErrConsumerGroupExists (metadata.go, v1.8.0 to HEAD).
_GROUP_EXISTS = "consumer group already exists"


def group_created_meanwhile(error: LiftbridgeError) -> bool:
    """Whether a join was refused because another member created the group between
    the server's look-up and its applying this join's creation of it (nothing of the
    join was applied; joining again joins the group created)."""
    return error.code == "FAILED_PRECONDITION" and _GROUP_EXISTS in error.details.lower()


def _group_error(
    code: grpc.StatusCode, text: str, make: Callable[..., LiftbridgeError]
) -> LiftbridgeError | None:
    """The consumer-group meaning of a status, if it has one."""
    if code is grpc.StatusCode.NOT_FOUND:
        return make(ConsumerGroupNotFoundError)
    if code is not grpc.StatusCode.FAILED_PRECONDITION:
        return None
    if _contains(text, _NO_GROUP_HINTS):
        return make(ConsumerGroupNotFoundError)
    if _contains(text, _MISMATCH_HINTS):
        return make(CoordinatorMismatchError)
    if _contains(text, _NOT_MEMBER_HINTS):
        return make(NotGroupMemberError)
    if _contains(text, _ALREADY_MEMBER_HINTS):
        return make(ConsumerIdInUseError)
    if "stream does not exist" in text.lower():
        return make(NoSuchStreamError)
    return None


def error_from_rpc_error(
    error: grpc.RpcError, context: CallContext = CallContext.GENERIC
) -> LiftbridgeError:
    """Map a ``grpc.RpcError`` (which is also a ``grpc.Call``) with :func:`error_from_status`."""
    code_fn = getattr(error, "code", None)
    details_fn = getattr(error, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else ""
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    return error_from_status(code, details or "", context)


#: ``PublishAsyncError.Code`` numbers (liftbridge-api) to names.
_ASYNC_CODES = {
    0: "UNKNOWN",
    1: "BAD_REQUEST",
    2: "NOT_FOUND",
    3: "INTERNAL",
    4: "READONLY",
    5: "INCORRECT_OFFSET",
    6: "ENCRYPTION_FAILED",
    7: "PERMISSION_DENIED",
}


#: How the server words a publish it could not hand to NATS. Nothing was stored.
_NATS_PUBLISH_FAILED = "failed to publish to NATS: "
#: The nats.go errors among those that mean its connection is down for now (closed,
#: reconnecting with a full buffer, draining, stale). Others, such as "nats: maximum
#: payload exceeded", are about the message and would fail again.
_NATS_CONNECTION_DOWN = (
    "nats: connection closed",
    "nats: outbound buffer limit exceeded",
    "nats: connection reconnecting",
    "nats: connection draining",
    "nats: stale connection",
    "nats: no servers available for connection",
)
#: How Go words a write on a socket whose peer is gone (the NATS server went away under
#: the broker): nats.go reports it before it notices the connection is down. The bytes
#: were refused by the kernel, so the message never reached NATS.
_SOCKET_WRITE_FAILED = ("write tcp ", "write unix ")
_PEER_GONE = (": write: broken pipe", ": write: connection reset by peer")


def is_transient_async_error(code: int, message: str) -> bool:
    """Whether a ``PublishAsyncError`` means "not stored, try again shortly".

    The server answers INTERNAL "failed to publish to NATS: <nats error>" when it could
    not hand the message to NATS; when that error says its NATS connection is down
    (closed, reconnecting, ...) or its socket's peer is gone (a write that met a broken
    pipe or a reset), the message never reached NATS and sending it again shortly cannot
    duplicate it.
    """
    if _ASYNC_CODES.get(code) != "INTERNAL" or not message.startswith(_NATS_PUBLISH_FAILED):
        return False
    reason = message[len(_NATS_PUBLISH_FAILED) :]
    return reason.startswith(_NATS_CONNECTION_DOWN) or (
        reason.startswith(_SOCKET_WRITE_FAILED) and reason.endswith(_PEER_GONE)
    )


def error_from_async_error(code: int, message: str) -> LiftbridgeError:
    """Map a ``PublishAsyncError`` (a refused message on the PublishAsync stream)."""
    name = _ASYNC_CODES.get(code, "UNKNOWN")
    text = f"publish: {message or name}"
    if name == "NOT_FOUND":
        cls = NoSuchStreamError if "stream" in message.lower() else NoSuchPartitionError
        return cls(text, code=name, details=message)
    if name == "READONLY":
        return ReadonlyPartitionError(text, code=name, details=message)
    if name == "INCORRECT_OFFSET":
        return IncorrectOffsetError(text, code=name, details=message)
    if name == "PERMISSION_DENIED":
        return _permission_denied("publish", message, name)
    return PublishRejectedError(text, code=name, details=message)


def error_from_ack_error(ack_error: str) -> LiftbridgeError:
    """Map the name of a leader's ``Ack.Error`` (e.g. ``"TOO_LARGE"``)."""
    if ack_error == "INCORRECT_OFFSET":
        return IncorrectOffsetError(
            "publish: expected offset did not match", code=ack_error, details=ack_error
        )
    if ack_error == "TOO_LARGE":
        text = "publish: message exceeds the server's clustering.replication.max.bytes"
        return PublishRejectedError(text, code=ack_error, details=ack_error)
    return PublishRejectedError(
        f"publish: the leader refused the message ({ack_error})", code=ack_error, details=ack_error
    )
