"""Option groups: frozen dataclasses validated on construction.

Options are data, not behaviour: they are immutable, picklable (so a Spark driver can
ship them to executors) and checked in ``__post_init__``, which raises
:class:`~liftbridge_sync.errors.ConfigurationError` naming the bad field.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict

from liftbridge_sync._durations import check_seconds
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError

__all__ = [
    "ClientOptions",
    "RetryPolicy",
    "TLSOptions",
    "parse_address",
    "parse_addresses",
]


def _seconds(obj: object, name: str, *, allow_zero: bool = False, none: str = "") -> None:
    """Check the field ``name`` of ``obj``: seconds > 0 (or >= 0), finite, in range.

    ``none`` says what ``None`` means for the field, if anything: ``"unlimited"`` (then
    ``inf`` means it too and is stored as ``None``) or ``"off"`` (``None`` only).
    """
    value = getattr(obj, name)
    if value is None and none:
        return
    seconds = check_seconds(name, value, allow_zero=allow_zero, unlimited=none == "unlimited")
    object.__setattr__(obj, name, seconds)


def _grpc_option_ok(pair: tuple[object, ...]) -> bool:
    """What grpcio's channel arguments take without failing untyped on first use."""
    if len(pair) != 2:
        return False
    name, value = pair
    if not isinstance(name, str):
        return False
    try:
        name.encode("utf-8")
        if isinstance(value, str):
            value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -(2**31) <= value < 2**31
    return isinstance(value, str)


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def _host_name_problem(host: str) -> str:
    """Why Python's ``socket`` module cannot look ``host`` up, or ``""``.

    It encodes every name with the ``idna`` codec first, which refuses an empty label
    (``a..b``, ``.``) and one longer than 63 characters with a bare ``UnicodeError``.
    """
    if _is_ipv6(host):
        return ""
    try:
        host.encode("idna")
    except UnicodeError as exc:
        return f"{host!r} is not a host name (an empty label or one over 63 characters: {exc})"
    return ""


def _grpc_options(value: object) -> tuple[tuple[object, ...], ...]:
    """``value`` as a tuple of pairs, each a tuple.

    A str, a dict or a pair that is a str would iterate into one-letter names and values.

    Raises:
        ConfigurationError: ``value`` is not a collection of tuples or lists.
    """
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(
            "'grpc_options' must be a sequence of (name, value) tuples, got a "
            f"{type(value).__name__} (a dict: pass tuple(d.items()))"
        )
    pairs = []
    for pair in value:
        if not isinstance(pair, tuple | list):
            raise ConfigurationError(
                f"'grpc_options' must hold (name, value) tuples, got a {type(pair).__name__}"
            )
        pairs.append(tuple(pair))
    return tuple(pairs)


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[v6]:port"``) and check both parts.

    An IPv6 host must be in brackets: ``"[::1]:9292"``, ``"[fe80::1%eth0]:9292"``. An
    unbracketed one is refused, with or without a port: in ``"fe80::1:9292"`` the
    ``9292`` may be the port or the address's last group (``fe80::1:9292`` is an IPv6
    address of its own), and every address needs a port. Brackets hold only an IPv6
    address.

    Raises:
        ConfigurationError: if the address is not of that form.
    """
    if not isinstance(address, str) or not address.strip():
        raise ConfigurationError(f"address must be a non-empty 'host:port' str, got {address!r}")
    text = address.strip()
    scheme, found, _ = text.partition("://")
    if found and scheme and "[" not in scheme:
        # Not an IPv6-looking host, as the colon after the scheme made it look.
        raise ConfigurationError(
            f"address {address!r} has a scheme ({scheme}://): give 'host:port' alone "
            "(the client speaks gRPC; TLS is set with the tls option)"
        )
    if _is_ipv6(text):
        # Read up to the last colon it would be a host and a port, or a whole address.
        raise ConfigurationError(
            f"address {address!r} is ambiguous or has no port: an IPv6 host goes in "
            f"brackets, followed by the port (e.g. '[{text}]:9292')"
        )
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ConfigurationError(f"address {address!r} must look like 'host:port'")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if "," in host:
        # A list item holding a comma-separated list: read as one IPv6-looking host.
        raise ConfigurationError(
            f"address {address!r} has a ','; give one 'host:port' per list item"
        )
    if ":" in host and not bracketed:
        raise ConfigurationError(
            f"address {address!r} has an IPv6-looking host without brackets: write "
            f"'[host]:port' (e.g. '[::1]:9292')"
        )
    if bracketed and not _is_ipv6(host):
        raise ConfigurationError(
            f"address {address!r} has brackets around a host that is not an IPv6 address"
        )
    if "[" in host or "]" in host:
        raise ConfigurationError(f"address {address!r} has a stray '[' or ']'")
    # gRPC would cut a host at a NUL (and dial another host), and fail untyped on one
    # that is not UTF-8; int() would take "1_0" and non-ASCII digits.
    if not host.isprintable() or any(c.isspace() for c in host):
        raise ConfigurationError(f"address {address!r} has control or space characters")
    try:
        host.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(f"address {address!r} is not valid UTF-8") from None
    if not host:
        raise ConfigurationError(f"address {address!r} has an empty host")
    problem = _host_name_problem(host)
    if problem:
        raise ConfigurationError(f"address {address!r}: {problem}")
    if not (port_text.isascii() and port_text.isdigit()):
        raise ConfigurationError(f"address {address!r} has a non-numeric port")
    # Checked before int(): one of more than 4300 digits raises ValueError in there.
    port = int(port_text) if len(port_text) <= 5 else 0
    if not 0 < port < 65536:
        raise ConfigurationError(f"address {address!r} has a port outside 1..65535")
    return host, port


def parse_addresses(addresses: str | Sequence[str]) -> tuple[str, ...]:
    """Normalise a seed list (a sequence, or a comma-separated str) to ``host:port`` strs."""
    if isinstance(addresses, str):
        items = [part for part in addresses.split(",") if part.strip()]
    elif isinstance(addresses, Sequence) and not isinstance(addresses, bytes | bytearray):
        items = list(addresses)
    else:
        raise ArgumentTypeError(
            "'addresses' must be a str or a sequence of 'host:port' strs, got "
            f"{type(addresses).__name__}"
        )
    if not items:
        raise ConfigurationError("at least one broker address is required")
    result: list[str] = []
    for item in items:
        host, port = parse_address(item)
        normalised = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if normalised not in result:
            result.append(normalised)
    return tuple(result)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How retryable failures (unavailable broker, not-leader) are retried.

    A call is attempted at most ``max_attempts`` times and never retried after
    ``max_delay`` seconds in total. Between attempts it sleeps an exponentially growing
    delay starting at ``initial`` seconds and capped at ``maximum``, plus up to
    ``jitter`` seconds of random jitter. Immutable; safe to share and to pickle.
    """

    #: Attempts in all, including the first.
    max_attempts: int = 10
    #: Seconds after which no further attempt is started.
    max_delay: float = 10.0
    #: First back-off delay, seconds.
    initial: float = 0.05
    #: Largest back-off delay, seconds.
    maximum: float = 1.0
    #: Largest random jitter added to each delay, seconds.
    jitter: float = 0.05

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ConfigurationError("'max_attempts' must be an int")
        if self.max_attempts < 1:
            raise ConfigurationError(f"'max_attempts' must be >= 1, got {self.max_attempts}")
        for name in ("max_delay", "initial", "maximum", "jitter"):
            _seconds(self, name, allow_zero=True)
        if self.maximum < self.initial:
            raise ConfigurationError("'maximum' must be >= 'initial'")

    @classmethod
    def no_retry(cls) -> RetryPolicy:
        """A policy that makes exactly one attempt."""
        return cls(max_attempts=1, max_delay=0.0, initial=0.0, maximum=0.0, jitter=0.0)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _read_pem(name: str, value: bytes | str | os.PathLike[str] | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str | os.PathLike):
        try:
            with open(os.fspath(value), "rb") as handle:
                return handle.read()
        # ValueError: a NUL in the path; UnicodeEncodeError (one): a lone surrogate.
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"{name!r}: cannot read {value!r}: {exc}") from exc
    raise ConfigurationError(f"{name!r} must be PEM bytes or a file path (str or os.PathLike)")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TLSOptions:
    """TLS (and mutual TLS) for the gRPC connections.

    Each certificate or key is PEM ``bytes`` or the path (``str`` or
    :class:`os.PathLike`, e.g. :class:`pathlib.Path`) of a PEM file; paths are
    read when the options are built, so the object is self-contained. Immutable; safe to
    share and to pickle.
    """

    #: CA bundle that signs the server certificate. ``None``: the system CA store as
    #: OpenSSL finds it (``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` choose another), read
    #: once per client and trusted by every connection, grpcio's included.
    ca_cert: bytes | str | os.PathLike[str] | None = None
    #: Client certificate chain for mutual TLS.
    client_cert: bytes | str | os.PathLike[str] | None = None
    #: Private key of the client certificate, unencrypted (an encrypted one is a
    #: ``ConfigurationError`` when the first connection is set up).
    client_key: bytes | str | os.PathLike[str] | None = None
    #: Override the name checked against the server certificate (SNI and verification).
    server_name: str | None = None

    def __post_init__(self) -> None:
        for name in ("ca_cert", "client_cert", "client_key"):
            object.__setattr__(self, name, _read_pem(name, getattr(self, name)))
        if (self.client_cert is None) != (self.client_key is None):
            raise ConfigurationError("'client_cert' and 'client_key' must be given together")
        server = self.server_name
        if server is None:
            return
        if not isinstance(server, str) or not server:
            raise ConfigurationError(f"'server_name' must be a non-empty str, got {server!r}")
        # It goes into SNI and gRPC's target name override: no controls, no spaces.
        if not server.isprintable() or any(c.isspace() for c in server) or not _utf8(server):
            raise ConfigurationError(f"'server_name' {server!r} is not a host name")
        problem = _host_name_problem(server)
        if problem:
            raise ConfigurationError(f"'server_name': {problem}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """Everything a :class:`~liftbridge_sync.Client` is built from.

    Immutable and picklable: ship it to Spark executors and call
    ``Client.for_process(options)`` there.
    """

    #: Seed brokers, ``"host:port"`` (an IPv6 host in brackets: ``"[::1]:9292"``; see
    #: :func:`parse_address`). Further brokers are learnt from metadata.
    addresses: tuple[str, ...]
    #: OpenTelemetry traces and metrics (:mod:`liftbridge_sync.otel`) when the API is
    #: installed and an SDK is configured at the first publish; ``False`` turns them off.
    telemetry: bool = True
    #: With telemetry, inject each publish's span context into its headers with the
    #: configured propagator (W3C ``traceparent``/``tracestate`` and ``baggage`` by
    #: default), never over a header the caller set, nor when the caller set a context.
    trace_propagation: bool = True
    #: With telemetry, a ``create <stream>`` span per message of a ``publish_batch``,
    #: whose context the message carries, linked from the batch's ``send`` span (the
    #: OpenTelemetry messaging conventions for batches); ``False``: the batch's one
    #: ``send`` span, whose context every message carries.
    batch_create_spans: bool = True
    #: Maps the ``"host:port"`` a broker advertises in metadata to one this client can
    #: reach (Kubernetes pod names, NAT, Docker port maps), or returns it unchanged.
    #: Applied to every broker address the client learns, so unary calls, publishing,
    #: subscriptions and consumer groups all dial the translated address; seeds are used
    #: as given. Called from any thread; must be quick and thread-safe. To ship the
    #: options to Spark executors it must be picklable (a module-level function).
    address_translator: Callable[[str], str] | None = None
    #: TLS settings; ``None`` for plaintext.
    tls: TLSOptions | None = None
    #: Retry policy for retryable RPC failures. It also bounds how long publishes wait
    #: for a reachable broker: a run of failed attempts to open the publish stream that
    #: uses it up fails the publishes not yet sent with ``BrokerUnavailableError``.
    retry: RetryPolicy = RetryPolicy()
    #: Deadline of each unary RPC attempt, seconds.
    rpc_timeout: float = 10.0
    #: Seconds until an unacknowledged publish fails with ``AckTimeoutError``. Long
    #: enough to ride out a partition leader failover on a server with default settings
    #: (``clustering.replica.max.leader.timeout`` is 15 s), during which the publish is
    #: re-sent to the new leader (``resend_after``).
    ack_timeout: float = 30.0
    #: Publishes awaiting an ack before ``publish_async`` blocks (1 to 2**63 - 1).
    #: ``publish()`` callers blocked for a slot are served first, in arrival order (a
    #: thread flooding ``publish_async`` does not starve them).
    max_in_flight: int = 1024
    #: Seconds ``publish_async`` blocks for a free slot (``None`` or ``inf``: forever). Not shorter
    #: than ``ack_timeout`` by default: a slot frees at the latest when the oldest
    #: publish in flight times out, so a failover never fails a publish for want of room.
    enqueue_timeout: float | None = 30.0
    #: Seconds the oldest unacknowledged publish to a partition may wait before the
    #: client checks with the partition's leader whether it was lost (a leader failover
    #: or a NATS restart loses publishes in flight) and, if so, re-sends the partition's
    #: unacknowledged publishes in order (``None`` or ``inf``: never; they then time out).
    resend_after: float | None = 1.0
    #: Seconds a subscription keeps trying to resubscribe after losing its stream.
    resubscribe_wait: float = 30.0
    #: Seconds a stream's cached partition count places keys (``partitioner``) before
    #: it is fetched again (``None`` or ``inf``: never). A stream deleted and created
    #: again under its name with another count is noticed within this time.
    metadata_max_age: float | None = 30.0
    #: Extra gRPC channel options, e.g. ``(("grpc.max_receive_message_length", 8 << 20),)``.
    grpc_options: tuple[tuple[str, Any], ...] = ()
    #: Transport of the ``PublishAsync`` stream: ``"h2"`` (the default: our own HTTP/2
    #: connection that coalesces writes and reads acks in bulk) or ``"grpc"`` (grpcio).
    publish_transport: str = "h2"
    #: Seconds an ack of a pipelined publish may wait, once it arrived, to be read
    #: together with the other acks due (``None``: read every ack as it arrives). The
    #: ``"h2"`` publish transport then wakes once per burst of acks rather than once per
    #: network segment: less CPU per publish, the first acks of a burst resolving up to
    #: this much later. Never while a ``publish()`` call waits for its ack.
    ack_read_delay: float | None = 0.001
    #: Transport of ``Subscribe`` streams: ``"h2"`` (the default: our own HTTP/2 reader,
    #: messages decoded in bulk on the iterating thread) or ``"grpc"`` (grpcio with
    #: single-threaded streaming reads).
    subscribe_transport: str = "h2"
    #: Seconds a subscription stream may stay silent before the client sends an HTTP/2
    #: PING to check the connection (``None`` or ``inf``: never; at least 0.001, as gRPC
    #: counts it in milliseconds). The broker's gRPC
    #: keepalive policy (grpc-go's: no PINGs sooner than 5 minutes apart without data in
    #: between, else GOAWAY ``too_many_pings``) decides the rest on the ``"h2"``
    #: transport: the first PING of a quiet spell after messages (or of a connection)
    #: costs nothing there, and goes out after this or half of ``keepalive_timeout``,
    #: whichever is sooner; a stream that stays silent is PINGed this often but at least
    #: 5 minutes apart (1 s of slack added; a broker with another policy:
    #: ``grpc.http2.min_time_between_pings_ms`` in ``grpc_options``). It is also the
    #: grpcio channels' ``grpc.keepalive_time_ms`` (PINGs only while a call is in
    #: progress, spaced by grpcio itself; ``grpc_options`` override it).
    keepalive_interval: float | None = 300.0
    #: Seconds to wait for any sign of life after such a PING before the connection is
    #: declared dead (the subscription then resubscribes; at least 0.001). Also the
    #: bound on a broker that stops answering on the ``"h2"`` transports: a write to a
    #: subscription's connection fails after this long; on Linux ``TCP_USER_TIMEOUT`` is
    #: set to it (as grpc does), so our data left unacknowledged that long fails the
    #: connection; and a publish connection owing acks that hears nothing for half of it
    #: sends one PING and ends when nothing answers within the other half (noticed within
    #: 1.25 times this: 25 s by default). The publisher then reconnects and re-sends.
    keepalive_timeout: float = 20.0
    #: The largest message (response) accepted from a broker, in bytes, on every
    #: transport (grpcio's ``grpc.max_receive_message_length``, which ``grpc_options``
    #: may still set; gRPC's default). A larger one fails the call (a subscription with
    #: ``INTERNAL``) instead of being buffered.
    max_receive_message_size: int = 4 << 20

    def __post_init__(self) -> None:
        object.__setattr__(self, "addresses", parse_addresses(self.addresses))
        for flag in ("telemetry", "trace_propagation", "batch_create_spans"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(f"{flag!r} must be a bool")
        if self.address_translator is not None and not callable(self.address_translator):
            raise ConfigurationError("'address_translator' must be a callable or None")
        if self.tls is not None and not isinstance(self.tls, TLSOptions):
            raise ConfigurationError("'tls' must be a TLSOptions or None")
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError("'retry' must be a RetryPolicy")
        for name in ("rpc_timeout", "ack_timeout", "resubscribe_wait", "keepalive_timeout"):
            _seconds(self, name)
        for name in ("enqueue_timeout", "resend_after", "keepalive_interval", "metadata_max_age"):
            _seconds(self, name, none="unlimited")
        _seconds(self, "ack_read_delay", none="off")
        for name in ("keepalive_interval", "keepalive_timeout"):
            # gRPC takes both in whole milliseconds (grpc.keepalive_time_ms and _timeout_ms):
            # less than one became 0, which gRPC documents no meaning for and which the
            # "h2" transports read in grpc_options as "off". Refused rather than rounded
            # up: a PING every millisecond is no setting anybody wants either.
            value = getattr(self, name)
            if value is not None and value < 0.001:
                raise ConfigurationError(
                    f"{name!r} must be at least 0.001 s (gRPC counts it in whole "
                    f"milliseconds), got {value!r}"
                )
        size = self.max_receive_message_size
        if isinstance(size, bool) or not isinstance(size, int) or not 1024 <= size < 2**31:
            raise ConfigurationError(
                "'max_receive_message_size' must be an int from 1024 to 2**31 - 1 (gRPC "
                f"takes an int32), got {size!r}"
            )
        if isinstance(self.max_in_flight, bool) or not isinstance(self.max_in_flight, int):
            raise ConfigurationError("'max_in_flight' must be an int")
        # The C pending table counts in a C ssize_t: a larger value overflowed untyped on
        # the first publish.
        if not 1 <= self.max_in_flight < 2**63:
            raise ConfigurationError(
                f"'max_in_flight' must be from 1 to 2**63 - 1, got {self.max_in_flight}"
            )
        options = _grpc_options(self.grpc_options)
        if any(not _grpc_option_ok(pair) for pair in options):
            raise ConfigurationError(
                "'grpc_options' must be (name, value) pairs: a UTF-8 str name, and an int "
                "within int32 or a str value"
            )
        object.__setattr__(self, "grpc_options", options)
        if self.publish_transport not in ("grpc", "h2"):
            raise ConfigurationError("'publish_transport' must be 'grpc' or 'h2'")

        if self.subscribe_transport not in ("grpc", "h2"):
            raise ConfigurationError("'subscribe_transport' must be 'grpc' or 'h2'")

    def replace(self, **changes: Any) -> ClientOptions:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


class ClientKwargs(TypedDict, total=False):
    """Keyword arguments of :class:`~liftbridge_sync.Client`: fields of :class:`ClientOptions`."""

    address_translator: Callable[[str], str] | None
    telemetry: bool
    trace_propagation: bool
    batch_create_spans: bool
    tls: TLSOptions | None
    retry: RetryPolicy
    rpc_timeout: float
    ack_timeout: float
    max_in_flight: int
    enqueue_timeout: float | None
    resend_after: float | None
    resubscribe_wait: float
    metadata_max_age: float | None
    grpc_options: tuple[tuple[str, Any], ...]
    publish_transport: str
    ack_read_delay: float | None
    keepalive_interval: float | None
    keepalive_timeout: float
    subscribe_transport: str
    max_receive_message_size: int
