"""Argument checks that run before anything reaches the wire: the only ones in the package.

The server trusts its clients on several inputs (a negative partition count crashes its
CreateStream handler), so every public entry point validates here and raises
:class:`~liftbridge_sync.errors.ConfigurationError` (or ``TypeError`` for wrong types of
payload) with a message naming the argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Literal, overload

from liftbridge_sync._durations import TIMEOUT_MAX_SECONDS, check_seconds
from liftbridge_sync._ids import check_id, check_label, check_optional_text
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError, ServerError
from liftbridge_sync.models import AckPolicy

__all__ = [
    "TIMEOUT_MAX_SECONDS",
    "check_timeout",
    "check_ack_policy",
    "check_optional_text",
    "INT32_MAX",
    "DURATION_MAX_MS",
    "HEADER_NAME_MAX_BYTES",
    "HEADERS_MAX",
    "SERVER_HEADERS",
    "INT64_MAX",
    "CREATE_SECONDS_PER_PARTITION",
    "MAX_PARTITIONS",
    "RESERVED_STREAMS",
    "check_bool",
    "check_bytes",
    "check_provider",
    "check_headers",
    "check_id",
    "check_int",
    "check_label",
    "check_name",
    "check_partition",
    "check_partitions",
    "check_publish_subject",
    "check_stream_subject",
    "check_subject",
    "duration_ms",
    "offset_after",
    "refuse_wildcards",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: The longest duration a server setting can hold: it turns milliseconds into Go's
#: int64 nanoseconds (``time.Duration(ms) * time.Millisecond``).
DURATION_MAX_MS = INT64_MAX // 1_000_000
#: The most partitions a stream may be created with. The server allocates the whole
#: partition list before any check (2**31 - 1 would exhaust a broker's memory), and
#: each partition costs every replica files, goroutines and memory at once: on v1.9.0
#: 2,000 partitions took 1.1 GB and over 10 s to create, and 10,000 ran a server with
#: 20,000 file descriptors out of them; it panicked and never started again on its data.
MAX_PARTITIONS = 1_000
#: How much longer than ``rpc_timeout`` CreateStream may take per partition: 1,000
#: partitions took 9.8 s on a two-core machine (100 took 0.4 s).
CREATE_SECONDS_PER_PARTITION = 0.02
#: The gRPC server's default receive limit, which Liftbridge does not change: a larger
#: request ends the whole PublishAsync stream with RESOURCE_EXHAUSTED.
SERVER_MAX_REQUEST_BYTES = 4 * 1024 * 1024
RESERVED_STREAMS = frozenset({"__activity", "__cursors"})


def offset_after(offset: int, what: str) -> int:
    """The offset after ``offset``, a broker's (``what`` names it in the error).

    Raises:
        ServerError: ``offset`` is the largest an int64 offset can be (or more), which
            nothing can follow: a request for the next one could not be encoded.
    """
    if offset >= INT64_MAX:
        raise ServerError(
            f"{what} is offset {offset}, the largest an offset can be: no message can follow it"
        )
    return offset + 1


def check_int(name: str, value: object, *, minimum: int, maximum: int = INT64_MAX) -> int:
    """An int (not bool) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name!r} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ConfigurationError(f"{name!r} must be between {minimum} and {maximum}, got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    """A real bool."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name!r} must be a bool, got {type(value).__name__}")
    return value


# The server turns a stream name into NATS subjects (``<namespace>.<name>.<id>.replicate``)
# and into a directory (``<data dir>/streams/<name>/<id>``), both inside its Raft state
# machine: a name that fails either panics the server on apply and again on every restart
# (the entry stays in the Raft log). NAME_MAX on Linux file systems is 255 bytes.
STREAM_NAME_MAX_BYTES = 255
# A subject and a queue group travel in one NATS control line (4 KiB by default) together
# with the server's own prefixes and reply inboxes; 1 KiB each keeps well inside it.
SUBJECT_MAX_BYTES = 1024
NATS_WILDCARDS = frozenset({"*", ">"})


def _check_printable(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name!r} must be a str, got {type(value).__name__}")
    if not value:
        raise ConfigurationError(f"{name!r} must not be empty")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ConfigurationError(f"{name!r} must not contain whitespace or control characters")
    return value


def _check_tokens(name: str, value: str, *, what: str) -> None:
    if any(not token for token in value.split(".")):
        raise ConfigurationError(
            f"{name!r}: {value!r} is not a valid {what}: it has an empty dot-separated token "
            "(a leading, trailing or doubled '.')"
        )


def check_name(
    name: str, value: object, *, allow_reserved: bool = False, creating: bool = False
) -> str:
    """A stream name the server can turn into a NATS subject token and a directory.

    The rules, taken from the server's code (v1.9.0):

    * a non-empty ``str`` without whitespace or control characters;
    * no empty dot-separated token: not ``"."``, ``".."``, ``".a"``, ``"a."`` or
      ``"a..b"`` (the name is a token run of the subject ``<namespace>.<name>.<id>...``);
    * no token that is a NATS wildcard (``"*"`` or ``">"``), which would subscribe the
      partition to other streams' replication traffic;
    * at most 255 bytes of UTF-8 (one directory name);
    * when creating, no ``"/"`` or ``"\\"``: the name is joined into a path, so
      ``"../x"`` escapes the data directory and ``"a/b"`` nests inside stream ``"a"``
      (deleting ``"a"`` would delete it);
    * not ``"__activity"`` or ``"__cursors"`` unless ``allow_reserved`` (reads may name them).

    Any name that breaks one of the first four rules would have killed the server at
    creation, so refusing it for reads too loses nothing.

    Raises:
        ConfigurationError: naming the argument and the rule.
    """
    stream = _check_printable(name, value)
    _check_tokens(name, stream, what="stream name")
    if any(token in NATS_WILDCARDS for token in stream.split(".")):
        raise ConfigurationError(
            f"{name!r}: {stream!r} is not a valid stream name: '*' and '>' tokens are NATS "
            "wildcards"
        )
    if len(stream.encode("utf-8", "surrogatepass")) > STREAM_NAME_MAX_BYTES:
        raise ConfigurationError(
            f"{name!r} must be at most {STREAM_NAME_MAX_BYTES} bytes of UTF-8 "
            "(the server stores each stream in a directory of that name)"
        )
    if creating and ("/" in stream or "\\" in stream):
        raise ConfigurationError(
            f"{name!r}: {stream!r} is not a valid stream name: '/' and '\\' would make the "
            "server store it outside its own directory"
        )
    if not allow_reserved and stream in RESERVED_STREAMS:
        raise ConfigurationError(f"{name!r}: {stream!r} is reserved by the server")
    return stream


def check_subject(name: str, value: object, *, carries_messages: bool = True) -> str:
    """A NATS subject: dot-separated non-empty tokens, no whitespace, at most 1 KiB;
    unless ``carries_messages`` is false (a queue group's name), not the server's
    bootstrap subject either (a message there makes a seed server exit).

    Wildcard tokens are allowed (a stream may listen on ``"orders.*"``).

    Raises:
        ConfigurationError: naming the argument and the rule.
    """
    subject = _check_printable(name, value)
    _check_tokens(name, subject, what="NATS subject")
    if carries_messages:
        _refuse_bootstrap_subject(name, subject)
    if len(subject.encode("utf-8", "surrogatepass")) > SUBJECT_MAX_BYTES:
        raise ConfigurationError(f"{name!r} must be at most {SUBJECT_MAX_BYTES} bytes of UTF-8")
    return subject


#: The tokens of the subject on which a server started with ``raft.bootstrap.seed``
#: listens for another seed (``<namespace>.raft.metadata.bootstrap``, and its
#: ``.reply``): any message there makes it exit (v1.9.0, ``detectBootstrapMisconfig``).
_BOOTSTRAP_TOKENS = ("raft", "metadata", "bootstrap")


def check_stream_subject(name: str, value: object, *, partitions: int) -> str:
    """The subject of a stream of ``partitions`` partitions: :func:`check_subject`, and
    a ``>`` wildcard only where every partition's subject stays a valid NATS subject.

    The server listens on the subject for partition 0 and on ``<subject>.<N>`` for
    partition N. NATS allows ``>`` only as the last token, so ``"a.>.b"``, and
    ``"a.>"`` with a second partition (``"a.>.1"``), make the server's NATS connection
    fail: every publish then times out, the next metadata change panics the server, and
    it never starts again on that data (v1.9.0). A subject of ``">"`` alone would store
    every message on the NATS server, the Liftbridge server's own acks and activity
    included.

    Raises:
        ConfigurationError: naming the argument and the rule.
    """
    subject = check_subject(name, value)
    tokens = subject.split(".")
    if ">" in tokens[:-1]:
        raise ConfigurationError(
            f"{name!r}: {subject!r} has a '>' token before its last: NATS allows the '>' "
            "wildcard only at the end of a subject"
        )
    if tokens[-1] == ">" and partitions > 1:
        raise ConfigurationError(
            f"{name!r}: {subject!r} ends with '>', which a stream of {partitions} partitions "
            f"cannot take: the server listens on '{subject}.<N>' for partition N >= 1, which "
            "NATS refuses (a '>' must end the subject)"
        )
    if tokens == [">"]:
        raise ConfigurationError(
            f"{name!r}: '>' alone would store every message of the NATS server, the "
            "Liftbridge server's own acks and activity included; name a subject prefix "
            "such as 'orders.>'"
        )
    return subject


def _refuse_bootstrap_subject(name: str, subject: str) -> None:
    tokens = subject.split(".")
    width = len(_BOOTSTRAP_TOKENS)
    if any(
        tuple(tokens[i : i + width]) == _BOOTSTRAP_TOKENS for i in range(len(tokens) - width + 1)
    ):
        raise ConfigurationError(
            f"{name!r}: {subject!r} holds the tokens 'raft.metadata.bootstrap': a server "
            "started as the bootstrap seed exits on any message to its "
            "'<namespace>.raft.metadata.bootstrap' subject, so the client never sends to "
            "or creates a stream on such a subject"
        )


def check_publish_subject(name: str, value: object) -> str:
    """A NATS subject to publish or reply to: :func:`check_subject` without wildcards.

    NATS refuses a publish to a subject with a ``*`` or ``>`` token.

    Raises:
        ConfigurationError: naming the argument and the rule.
    """
    return refuse_wildcards(name, check_subject(name, value))


def refuse_wildcards(name: str, subject: str) -> str:
    """``subject`` (already checked) unless a token is a NATS wildcard.

    Raises:
        ConfigurationError: naming the argument.
    """
    if any(token in NATS_WILDCARDS for token in subject.split(".")):
        raise ConfigurationError(
            f"{name!r}: {subject!r} has a '*' or '>' token: NATS wildcards cannot be published to"
        )
    return subject


def check_ack_policy(value: object) -> AckPolicy:
    """An :class:`~liftbridge_sync.models.AckPolicy` member."""
    if not isinstance(value, AckPolicy):
        raise ArgumentTypeError(f"'ack_policy' must be an AckPolicy, got {value!r}")
    return value


def check_timeout(name: str, value: object, *, allow_zero: bool = True) -> float | None:
    """Seconds to wait: ``None`` or ``inf`` for no limit, else a finite number >= 0.

    NaN, negative and huge values are refused here so that they can never reach a timer
    (where a NaN deadline would stall every other timer on the same thread).

    Raises:
        ArgumentTypeError: not a number.
        ConfigurationError: NaN, negative, zero when not allowed, or above ~24 days.
    """
    return check_seconds(name, value, allow_zero=allow_zero)


def check_partition(name: str, value: object) -> int:
    """A partition id."""
    return check_int(name, value, minimum=0, maximum=INT32_MAX)


def check_partitions(name: str, value: Iterable[int] | None) -> list[int]:
    """An optional collection of partition ids (``None`` = all)."""
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ArgumentTypeError(
            f"{name!r} must be an iterable of ints or None, got {type(value).__name__}"
        )
    result = [check_partition(name, item) for item in value]
    if not result:
        raise ConfigurationError(f"{name!r} must not be empty; pass None for all partitions")
    return sorted(set(result))


def duration_ms(
    name: str,
    value: float | timedelta | None,
    *,
    allow_zero: bool = True,
    inf_is_zero: bool = False,
) -> int | None:
    """Seconds (or a timedelta) as whole milliseconds, as the server expects.

    A positive duration below one millisecond would be sent as 0, which means
    "disabled" or "unlimited" to the server, so it is refused. With ``inf_is_zero``
    (durations whose 0 means "no limit"), ``inf`` is sent as that 0.

    Raises:
        ConfigurationError: not a number or timedelta, NaN, negative, infinite (unless
            ``inf_is_zero``), below 1 ms, or beyond what the server's durations hold
            (int64 nanoseconds, about 292 years: it multiplies the milliseconds into
            one, and a longer duration wraps negative and panics every broker).
    """
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name!r} must be seconds (int/float) or a timedelta")
    seconds = check_seconds(name, value, unlimited=inf_is_zero, maximum=DURATION_MAX_MS / 1000)
    if seconds is None:  # inf, with inf_is_zero
        return 0
    ms = round(seconds * 1000)
    if ms == 0 and (seconds > 0 or not allow_zero):
        raise ConfigurationError(f"{name!r} must be at least 1 ms, got {value!r}")
    return min(ms, DURATION_MAX_MS)


@overload
def check_bytes(name: str, value: object, *, optional: Literal[False] = False) -> bytes: ...
@overload
def check_bytes(name: str, value: object, *, optional: bool) -> bytes | None: ...


def check_bytes(name: str, value: object, *, optional: bool = False) -> bytes | None:
    """Bytes-like payloads; a ``str`` is refused with a hint to encode it (``None`` only
    when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        raise ArgumentTypeError(
            f"{name} must be bytes-like, not str; encode it first, e.g. {name}.encode()"
        )
    try:
        # Any object with the buffer protocol (bytearray, memoryview, array.array, mmap,
        # a NumPy array): bytes-like, as Python means it. Its bytes in memory order.
        with memoryview(value) as view:  # type: ignore[arg-type]
            return view.tobytes()
    except TypeError:
        pass
    except ValueError as exc:  # released or unexported buffers
        if isinstance(value, memoryview):
            raise ArgumentTypeError(f"{name} is a released memoryview") from None
        raise ArgumentTypeError(f"{name}: its buffer cannot be read: {exc}") from None
    raise ArgumentTypeError(f"{name} must be bytes-like, not {type(value).__name__}")


#: The longest header name the server's log holds, in bytes of UTF-8: its encoder
#: refuses a longer one (an int16 length) and the partition leader panics on it.
HEADER_NAME_MAX_BYTES = 2**15 - 1


#: The most headers a message in the server's log holds (a 16-bit count), the two the
#: server sets on every message included.
HEADERS_MAX = 2**16 - 1
#: The headers the server sets on every message it stores (over any the client sent).
SERVER_HEADERS = ("subject", "reply")


def check_headers(value: Mapping[str, object] | None) -> dict[str, bytes]:
    """Headers: a mapping of non-empty str keys to bytes-like values.

    A name must be valid UTF-8 of at most 32767 bytes: the server writes each name to
    its log with an int16 length and panics (the broker dies) on a longer one. With the
    server's ``subject`` and ``reply`` there may be at most 65535 headers: the server
    writes their count in 16 bits, so 65536 would be read back as none.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ArgumentTypeError("headers must be a mapping of str to bytes")
    result: dict[str, bytes] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ArgumentTypeError(f"header names must be str, got {key!r}")
        if not key:
            raise ConfigurationError("header names must not be empty")
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise ConfigurationError(f"header name {key!r} is not valid UTF-8") from exc
        if size > HEADER_NAME_MAX_BYTES:
            raise ConfigurationError(
                f"header name {key[:20]!r}... is {size} bytes of UTF-8; the server holds at "
                f"most {HEADER_NAME_MAX_BYTES} (a longer one crashes the partition leader)"
            )
        checked = check_bytes(f"headers[{key!r}]", item)
        assert checked is not None
        result[key] = checked
    if len(result) > HEADERS_MAX - 2:
        total = len(result) + sum(name not in result for name in SERVER_HEADERS)
        if total > HEADERS_MAX:
            raise ConfigurationError(
                f"{len(result)} headers are too many: with the server's own "
                f"{' and '.join(repr(n) for n in SERVER_HEADERS)} a message holds at most "
                f"{HEADERS_MAX} (the server counts them in 16 bits: more would be stored "
                "with some or none of them)"
            )
    return result


def check_provider(name: str, provider: object, method: str) -> None:
    """Refuse a ``provider`` argument that is not an OpenTelemetry provider (or
    ``None``), where it is given rather than at every publish; told by its ``method``
    (``get_tracer``, ``get_meter``), without importing the optional API.

    Raises:
        ArgumentTypeError: naming the argument.
    """
    if provider is not None and (
        isinstance(provider, type) or not callable(getattr(provider, method, None))
    ):
        raise ArgumentTypeError(
            f"'{name}' must be an OpenTelemetry provider (with {method}()) or None, "
            f"got {type(provider).__name__}"
        )
