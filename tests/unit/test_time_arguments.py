"""Every public time argument: accepted, or refused with a typed library error.

Hypothesis feeds each argument floats of every kind (NaN, ±inf, 1e300, subnormals,
-0.0) and ints of any size: the call either works or raises a
:class:`~liftbridge_sync.errors.LiftbridgeError`, never a bare ``OverflowError`` or
``ValueError`` from inside the library. The calls that need a server are in
``tests/integration/test_time_arguments.py``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from liftbridge_sync import ClientOptions, ConfigurationError, LiftbridgeError, StartAt
from liftbridge_sync._durations import TIMEOUT_MAX_SECONDS, check_seconds
from liftbridge_sync._publishing.futures import PublishFuture
from liftbridge_sync.options import RetryPolicy
from liftbridge_sync.positions import StartKind
from liftbridge_sync.spark.config import client_options
from liftbridge_sync.spark.sink import SinkOptions
from liftbridge_sync.spark.source_options import SourceOptions

#: Every kind of number a caller might pass as seconds.
SECONDS: st.SearchStrategy[Any] = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            1e300,
            -1e300,
            5e-324,
            -5e-324,
            0.0,
            -0.0,
            TIMEOUT_MAX_SECONDS,
            TIMEOUT_MAX_SECONDS * (1 + 1e-15),
            10**400,
            -(10**400),
        ]
    ),
    st.integers(),
)

#: The boundary values every property test is made to try, whatever hypothesis draws.
EXAMPLES = [math.nan, math.inf, -math.inf, 1e300, 5e-324, -0.0, 10**5000, 0]


def outcome(call: Callable[[], object]) -> BaseException | None:
    """Run ``call``: ``None`` if it worked, else its error, which must be a library one.

    ``TimeoutError`` counts as working: it is what a short, valid timeout gives; so does
    ``StopIteration``, the end of a finished subscription.
    """
    try:
        call()
    except (LiftbridgeError, TimeoutError, StopIteration) as exc:
        return exc
    except Exception as exc:  # the property: nothing untyped escapes
        pytest.fail(f"untyped {type(exc).__name__}: {exc}")
    return None


def with_examples(test: Callable[..., None]) -> Callable[..., None]:
    for value in EXAMPLES:
        test = example(value=value)(test)
    return test


#: The least value of the options that have one besides > 0.
_LEAST = {"keepalive_interval": 0.001, "keepalive_timeout": 0.001}


@pytest.mark.parametrize(
    ("field", "unlimited"),
    [
        ("rpc_timeout", False),
        ("ack_timeout", False),
        ("enqueue_timeout", True),
        ("resend_after", True),
        ("ack_read_delay", False),
        ("resubscribe_wait", False),
        ("keepalive_interval", True),
        ("keepalive_timeout", False),
    ],
)
@given(value=SECONDS)
@with_examples
def test_client_options_seconds(field: str, unlimited: bool, value: Any) -> None:
    error = outcome(lambda: ClientOptions(addresses=("h:1",), **{field: value}))
    # gRPC counts the keepalive options in whole milliseconds: less than one is refused.
    in_range = _in_range(value, allow_zero=False) and value >= _LEAST.get(field, 0.0)
    if in_range:
        assert error is None
        assert getattr(ClientOptions(addresses=("h:1",), **{field: value}), field) == value
    elif value == math.inf and unlimited:
        assert error is None
        assert getattr(ClientOptions(addresses=("h:1",), **{field: value}), field) is None
    else:
        assert isinstance(error, ConfigurationError) and field in str(error)


@pytest.mark.parametrize("field", ["max_delay", "initial", "maximum", "jitter"])
@given(value=SECONDS)
@with_examples
def test_retry_policy_seconds(field: str, value: Any) -> None:
    others = (
        {"initial": 0.0, "maximum": TIMEOUT_MAX_SECONDS} if field in ("initial", "maximum") else {}
    )
    error = outcome(lambda: RetryPolicy(**{**others, field: value}))
    if _in_range(value, allow_zero=True):
        assert error is None
    else:
        assert isinstance(error, ConfigurationError) and field in str(error)


@given(value=SECONDS)
@with_examples
def test_start_time_delta(value: Any) -> None:
    error = outcome(lambda: StartAt.time_delta(value).resolve_timestamp_ns())
    if value == math.inf:
        start = StartAt.time_delta(value)
        assert start.kind is StartKind.TIME_DELTA and start.resolve_timestamp_ns() == 0
    elif isinstance(value, int | float) and 0 <= value <= (2**63 - 1) / 1e9:
        assert error is None
        assert StartAt.time_delta(value).resolve_timestamp_ns() >= 0
    else:
        assert isinstance(error, ConfigurationError)


@pytest.mark.parametrize("method", ["result", "exception"])
@given(value=SECONDS)
@with_examples
def test_publish_future_waits(method: str, value: Any) -> None:
    """An unresolved future: a valid timeout waits (until another thread resolves it)."""
    future: PublishFuture[str] = PublishFuture()
    resolver = threading.Timer(0.001, future.set_result, ("ack",))
    resolver.start()
    try:
        error = outcome(lambda: getattr(future, method)(value))
    finally:
        resolver.join()
    if _in_range(value, allow_zero=True) or value == math.inf:
        assert error is None or isinstance(error, TimeoutError)
    else:
        assert isinstance(error, ConfigurationError)
    # Resolved: checked all the same (a bad timeout is a bug wherever it is passed).
    assert outcome(lambda: getattr(future, method)(value)).__class__ is error.__class__ or (
        isinstance(error, TimeoutError)
    )


@given(value=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
@example(value=float("9" * 400))  # the digits of a huge int parse as inf
@example(value=1e300)
@example(value=math.nan)
def test_spark_options_seconds(value: float) -> None:
    """Spark options are strings of milliseconds."""
    base = {"brokers": "h:1", "stream": "s"}
    for parse, key in [
        (SourceOptions.parse, "pollTimeoutMs"),
        (SinkOptions.from_strings, "ackTimeoutMs"),
        (lambda o: client_options("h:1", o), "liftbridge.acktimeoutms"),
    ]:
        error = outcome(lambda: parse({**base, key.lower(): repr(value)}))  # noqa: B023
        # Whole milliseconds are the resolution, as in Kafka's connector: a wait under
        # 1 ms could never see an answer.
        if math.isnan(value) or not 1 <= value <= TIMEOUT_MAX_SECONDS * 1000:
            assert isinstance(error, ConfigurationError), (key, value)
        else:
            assert error is None, (key, value, error)


def test_nats_publisher_seconds() -> None:
    nats_publisher = pytest.importorskip("liftbridge_sync.nats.publisher")
    for bad in (math.nan, math.inf, -1.0, 1e300, 10**400, 0):
        for name in ("ack_timeout", "connect_timeout"):
            with pytest.raises(ConfigurationError, match=name):
                nats_publisher.NatsPublisher("nats://127.0.0.1:1", **{name: bad})


@pytest.mark.parametrize("allow_zero", [False, True])
@pytest.mark.parametrize("unlimited", [False, True])
@given(value=SECONDS)
@with_examples
def test_the_one_check(value: Any, allow_zero: bool, unlimited: bool) -> None:
    error = outcome(lambda: check_seconds("t", value, allow_zero=allow_zero, unlimited=unlimited))
    if _in_range(value, allow_zero=allow_zero):
        assert error is None
        assert check_seconds("t", value, allow_zero=allow_zero) == value
    elif value == math.inf and unlimited:
        assert check_seconds("t", value, unlimited=True) is None
    else:
        assert isinstance(error, ConfigurationError)


def _in_range(value: Any, *, allow_zero: bool) -> bool:
    """Whether ``value`` is a finite number of seconds a timeout accepts."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return (0 <= value if allow_zero else 0 < value) and value <= TIMEOUT_MAX_SECONDS


@given(value=SECONDS)
@with_examples
def test_health_check_and_stats_interval(value: Any) -> None:
    from liftbridge_sync import Client

    # Nothing listens on port 1: a valid budget ends in BrokerUnavailableError, fast
    # only if the budget is small, so valid values are tried with the check alone.
    error = outcome(lambda: check_seconds("t", value, allow_zero=False, unlimited=False))
    client = Client(["127.0.0.1:1"])
    try:
        if error is not None:
            assert type(outcome(lambda: client.check_health(value))) is type(error)
        refused = outcome(lambda: Client(["h:1"], stats_callback=print, stats_interval=value))
        if error is None and value < 0.001:  # a thread waking more often spins a core
            assert isinstance(refused, ConfigurationError), value
            assert "at least 0.001 s" in str(refused)
        else:
            assert type(refused) is type(error)
    finally:
        client.close()
