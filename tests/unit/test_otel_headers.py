"""liftbridge_sync.otel.extract_headers: the trace context from bare headers (Spark rows)."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry")

from opentelemetry import trace  # noqa: E402

from liftbridge_sync import ArgumentTypeError, otel  # noqa: E402

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _span_id(headers: object) -> int:
    context = otel.extract_headers(headers)  # type: ignore[arg-type]
    return trace.get_current_span(context).get_span_context().span_id


def test_every_shape_of_headers_gives_the_same_context() -> None:
    expected = 0xB7AD6B7169203331
    assert _span_id({"traceparent": PARENT.encode()}) == expected
    assert _span_id({"traceparent": PARENT}) == expected
    assert _span_id([("n", b"1"), ("traceparent", bytearray(PARENT.encode()))]) == expected
    assert _span_id((("traceparent", b"junk"), ("traceparent", PARENT.encode()))) == expected
    assert _span_id(None) == 0 and _span_id([]) == 0 and _span_id({"n": b"1"}) == 0


def test_bad_headers_are_a_typed_error() -> None:
    for bad in ("traceparent", [("only-a-key",)], [42], 42):
        with pytest.raises(ArgumentTypeError, match="headers must be a mapping or"):
            otel.extract_headers(bad)  # type: ignore[arg-type]


def test_a_text_value_that_is_no_ascii_is_read_as_bytes_are() -> None:
    """A lone surrogate in a str value raised UnicodeEncodeError from the propagator."""
    assert _span_id({"baggage": "\udc80=1", "traceparent": PARENT}) == _span_id(
        {"traceparent": PARENT.encode()}
    )
