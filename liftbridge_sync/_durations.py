"""The one check of every time argument: timeouts, intervals, delays and time deltas.

Every public argument that is a number of seconds goes through :func:`check_seconds`,
so that NaN, infinities, huge and negative values all get the same typed answer
(:class:`~liftbridge_sync.errors.ConfigurationError`) before they can reach a timer, a
lock or ``int()`` (where they would raise ``OverflowError`` or ``ValueError``, or stall
every other timer of the thread with a NaN deadline).

Pure functions; thread-safe.
"""

from __future__ import annotations

import math

from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError

__all__ = ["TIMEOUT_MAX_SECONDS", "check_seconds"]

#: The longest wait any option or call accepts (about 24 days): beyond it, threading,
#: ``select`` and gRPC timeouts overflow. ``None`` (or ``inf`` where a call says so)
#: is how to ask for no limit.
TIMEOUT_MAX_SECONDS = 2_000_000.0


def check_seconds(
    name: str,
    value: object,
    *,
    allow_zero: bool = True,
    unlimited: bool = True,
    maximum: float = TIMEOUT_MAX_SECONDS,
    minimum: float = 0.0,
) -> float | None:
    """A number of seconds, checked: ``None`` for no limit, else a float in range.

    Args:
        name: The argument's name, for the error message.
        value: What the caller passed.
        allow_zero: Whether 0 is meaningful.
        unlimited: Whether "no limit" is meaningful: ``None`` and ``inf`` are then
            accepted (both answered with ``None``); otherwise both are refused.
        maximum: The largest finite value accepted.
        minimum: The smallest value above 0 accepted, for an interval at which a
            thread wakes (a smaller one turns it into a busy loop).

    Returns:
        ``None`` for no limit, else ``float(value)``.

    Raises:
        ArgumentTypeError: not an ``int``/``float`` (or ``None`` where allowed).
        ConfigurationError: NaN, negative, zero when not allowed, infinite or ``None``
            where no limit makes no sense, above ``maximum``, or below ``minimum``
            (but above 0).
    """
    # The common case first, with no message built: a get(timeout) per message calls this.
    if type(value) is float and 0.0 < value <= maximum and value >= minimum:
        return value
    if value is None:
        if unlimited:
            return None
        raise ArgumentTypeError(f"{name!r} must be a number of seconds, got None")
    if isinstance(value, bool) or not isinstance(value, int | float):
        none = " or None" if unlimited else ""
        raise ArgumentTypeError(f"{name!r} must be seconds (int/float){none}, got {value!r}")
    if isinstance(value, int):  # compared as an int: float() of a huge one overflows
        if value < 0 or (value == 0 and not allow_zero):
            raise ConfigurationError(
                f"{name!r} must be a number {_bound(allow_zero)}, got {_shown(value)}"
            )
        if value > maximum:
            raise ConfigurationError(
                f"{name!r} must be at most {maximum:g} s, got {_shown(value)}{_hint(unlimited)}"
            )
        _check_minimum(name, value, minimum)
        return float(value)
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise ConfigurationError(f"{name!r} must be a number {_bound(allow_zero)}, got {value!r}")
    if seconds == math.inf:
        if unlimited:
            return None
        raise ConfigurationError(f"{name!r} must be a finite number of seconds, got {value!r}")
    if seconds > maximum:
        raise ConfigurationError(
            f"{name!r} must be at most {maximum:g} s, got {value!r}{_hint(unlimited)}"
        )
    _check_minimum(name, seconds, minimum)
    return seconds + 0.0  # -0.0 reads as 0.0


def _check_minimum(name: str, seconds: float, minimum: float) -> None:
    if 0 < seconds < minimum:
        raise ConfigurationError(
            f"{name!r} must be at least {minimum:g} s: a thread wakes at that interval, "
            f"and a shorter one spins a core; got {seconds!r}"
        )


def _bound(allow_zero: bool) -> str:
    return ">= 0" if allow_zero else "> 0"


def _hint(unlimited: bool) -> str:
    return "; use None or inf for no limit" if unlimited else ""


def _shown(value: int) -> str:
    """``repr`` of an int, which raises ``ValueError`` beyond 4300 digits."""
    return repr(value) if abs(value) < 10**50 else f"an int of {value.bit_length()} bits"
