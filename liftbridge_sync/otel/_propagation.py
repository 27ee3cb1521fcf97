"""Trace context in message headers: injected into a publish's, read from a message's.

The configured propagator (W3C ``traceparent``/``tracestate`` and ``baggage`` by
default) writes and reads them; a context the caller set is never replaced.

Thread-safe: pure functions and immutable getters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract as _extract
from opentelemetry.propagate import get_global_textmap
from opentelemetry.propagate import inject as _inject
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link

from liftbridge_sync.errors import ArgumentTypeError
from liftbridge_sync.models import Message

__all__ = ["caller_context", "extract", "extract_headers", "with_context"]

#: Headers the W3C trace context propagator writes.
_TRACE_HEADERS = ("traceparent", "tracestate")


class _TextGetter(Getter[Mapping[str, Any]]):
    """Message headers for a propagator: values read as text when it asks for them.

    Args:
        strings: Whether str values count (bare headers); a publish's headers are bytes,
            and a str there is refused by the publish, so it carries no context.

    Thread-safe: immutable.
    """

    def __init__(self, *, strings: bool) -> None:
        self._strings = strings

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        """The header ``key`` as text (``None``: absent or not a header value)."""
        value = carrier.get(key)
        if isinstance(value, bytes | bytearray | memoryview):
            return [bytes(value).decode("ascii", "replace")]
        if self._strings and isinstance(value, str):
            # As bytes are read: a header value is ASCII, and the propagators encode
            # what they are given (a lone surrogate raised UnicodeEncodeError there).
            return [value.encode("ascii", "replace").decode("ascii")]
        return None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        """Every header name."""
        return [name for name in carrier if isinstance(name, str)]


#: A publish's headers (bytes values), and bare ones (bytes or str values).
_PUBLISHED = _TextGetter(strings=False)
_BARE = _TextGetter(strings=True)


def with_context(
    span: trace.Span, headers: Mapping[str, bytes] | None
) -> Mapping[str, bytes] | None:
    """``headers`` plus what the propagator writes for ``span``, where it is absent.

    Unchanged when the caller set a trace context. A header the caller set
    (``baggage``, say) is never replaced. Headers that are no mapping are left for the
    publish to refuse, as it does without telemetry.
    """
    if headers is not None and not isinstance(headers, Mapping):
        return headers
    if headers and caller_context(headers) is not None:
        return headers
    carrier: dict[str, str] = {}
    _inject(carrier, context=trace.set_span_in_context(span))
    if not carrier:
        return headers
    merged = dict(headers) if headers else {}
    for name, value in carrier.items():
        if name not in merged:
            merged[name] = value.encode("utf-8")
    return merged


def caller_context(headers: Any) -> list[Link] | None:
    """``None`` when ``headers`` carry no trace context; else a link to the one the
    caller set (none if a ``traceparent`` or ``tracestate`` is not a valid one: it is
    still left as it is).

    Any propagator's context counts (B3, say), read from every header."""
    if not isinstance(headers, Mapping) or not headers:
        return None
    w3c = any(name in headers for name in _TRACE_HEADERS)
    if not w3c and not any(name in headers for name in get_global_textmap().fields):
        return None  # the common case: nothing a propagator writes
    caller = trace.get_current_span(_extract(headers, getter=_PUBLISHED)).get_span_context()
    if caller.is_valid:
        return [Link(caller)]
    return [] if w3c else None


def extract(message: Message) -> otel_context.Context:
    """The producer's trace context carried in ``message``'s headers.

    An empty context when the message carries none.

    Raises:
        ArgumentTypeError: ``message`` is no :class:`~liftbridge_sync.Message` (for
            bare headers: :func:`extract_headers`).

    Thread-safe: a pure function of the message.
    """
    if not isinstance(message, Message):
        raise ArgumentTypeError(
            f"'message' must be a liftbridge_sync.Message, got {type(message).__name__} "
            "(bare headers: extract_headers)"
        )
    return extract_headers(message.headers)


def extract_headers(
    headers: Mapping[str, bytes | str] | Iterable[Any] | None,
) -> otel_context.Context:
    """The producer's trace context carried in headers outside a :class:`Message`.

    ``headers`` is a mapping of name to value, or a sequence of ``(key, value)`` pairs
    such as the Spark source's ``headers array<struct<key, value>>`` column
    (``includeHeaders=true``) of a collected row; values are bytes or strings. The
    configured propagator reads what it needs (W3C ``traceparent``/``tracestate`` and
    ``baggage`` by default, B3 headers with a B3 propagator); the last of a repeated
    name wins. An empty context when there are none::

        for row in df.select("value", "headers").toLocalIterator():
            with tracer.start_as_current_span("handle", context=otel.extract_headers(row.headers)):
                handle(row.value)

    Thread-safe: a pure function of its argument.
    """
    pairs: list[Any]
    if headers is None:
        pairs = []
    elif isinstance(headers, Mapping):
        pairs = list(headers.items())
    elif isinstance(headers, str | bytes):
        raise ArgumentTypeError(
            f"headers must be a mapping or (key, value) pairs, got {type(headers).__name__}"
        )
    else:
        try:
            pairs = list(headers)
        except TypeError:
            raise ArgumentTypeError(
                f"headers must be a mapping or (key, value) pairs, got {type(headers).__name__}"
            ) from None
    carrier: dict[str, Any] = {}
    for pair in pairs:
        try:
            name, value = pair
        except (TypeError, ValueError):
            raise ArgumentTypeError(
                f"headers must be a mapping or (key, value) pairs, got an entry {pair!r:.60}"
            ) from None
        if isinstance(name, str) and value is not None:
            text = isinstance(value, str | bytes | bytearray | memoryview)
            carrier[name] = value if text else str(value)
    return _extract(carrier, getter=_BARE)
