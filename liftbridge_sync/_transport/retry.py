"""The one seam between liftbridge-sync and tenacity.

Policies are plain data (:class:`~liftbridge_sync.options.RetryPolicy`); this module turns
one into a **new** ``tenacity.Retrying`` per call, because ``Retrying`` objects keep
per-call state and are not safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync.errors import DeadlineExceededError
from liftbridge_sync.options import RetryPolicy

__all__ = [
    "Attempts",
    "Budget",
    "backoff_delay",
    "build_retrying",
    "call_with_retry",
    "is_retryable",
    "retryable_elsewhere",
]

_log = logging.getLogger("liftbridge_sync.retry")
_T = TypeVar("_T")


def is_retryable(error: BaseException) -> bool:
    """Whether an attempt that raised ``error`` may be retried (its ``retryable`` flag)."""
    return bool(getattr(error, "retryable", False))


def retryable_elsewhere(error: BaseException) -> bool:
    """Whether an idempotent call may be tried again, at another broker or at a refreshed
    leader, after ``error``: a retryable one, or a deadline (the broker it went to may be
    hung while the others answer)."""
    return is_retryable(error) or isinstance(error, DeadlineExceededError)


def backoff_delay(policy: RetryPolicy, failures: int) -> float:
    """Seconds to wait after ``failures`` failed attempts in a row: exponential from
    ``policy.initial``, capped at ``policy.maximum``, plus up to ``policy.jitter``.

    The one back-off formula: tenacity's waits below and the publisher's reconnects and
    re-sends, which keep their own loop, both use it.
    """
    delay = min(policy.maximum, policy.initial * 2.0 ** min(failures - 1, 30))
    return float(delay + random.uniform(0, policy.jitter))


class Attempts:
    """The failed attempts of one call, those of the calls made within it included (a
    leader call's metadata refreshes): retried each under ``max_attempts`` of their
    own, a policy of 3 attempts let a leader call fail 3 x 3 times.

    Attributes:
        limit: Failed attempts after which nothing within the call is retried.
        failed: Failed attempts so far.

    Counted by the one thread making the call; not thread-safe.
    """

    __slots__ = ("failed", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.failed = 0

    def fail(self) -> None:
        """Count one failed attempt."""
        self.failed += 1

    @property
    def spent(self) -> bool:
        """Whether no attempt is left to retry with."""
        return self.failed >= self.limit


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """The time one call's retry policy gives it, kept by the calls made within it (a
    leader call's metadata refreshes): retried each under a policy of its own, they
    took up to that policy's time again on every attempt of the call.

    Attributes:
        retry_until: A ``time.monotonic()`` after which no attempt is retried (the
            call's ``max_delay`` from its start).
        ends: A ``time.monotonic()`` by which every attempt has ended (one attempt's
            timeout after ``retry_until``).
        avoid: Brokers the call found hung or unreachable: the calls within it ask the
            others first (a hung broker would take a whole attempt's time again).
        attempts: The call's failed attempts, which the calls within it count too and
            stop retrying at (``None``: each keeps to its own ``max_attempts``).
        abort: Ends the call's RPCs, back-offs and waits for another thread's metadata
            refresh at once when aborted (its owner closed: a subscription's reader
            looking up where to resubscribe); they raise ``ClientClosedError``.

    Immutable but for ``attempts``, which only the thread making the call counts: the
    times and brokers are safe to share between threads (``abort`` is thread-safe).
    """

    retry_until: float
    ends: float
    avoid: frozenset[str] = frozenset()
    attempts: Attempts | None = dataclasses.field(default=None, compare=False)
    abort: DialAbort | None = dataclasses.field(default=None, compare=False)

    @classmethod
    def of(cls, policy: RetryPolicy, attempt_timeout: float) -> Budget:
        """The budget of a call starting now under ``policy``, each attempt of which
        takes at most ``attempt_timeout`` seconds."""
        now = time.monotonic()
        end = now + policy.max_delay
        return cls(end, end + attempt_timeout, attempts=Attempts(policy.max_attempts))

    @classmethod
    def once(cls, timeout: float) -> Budget:
        """The budget of a single attempt starting now: no retries, ``timeout`` seconds."""
        now = time.monotonic()
        return cls(now, now + timeout)


class _StopWhenSpent(tenacity.stop.stop_base):
    """Stop once the call's shared :class:`Attempts` are spent."""

    def __init__(self, attempts: Attempts) -> None:
        self._attempts = attempts

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._attempts.spent


class _StopBefore(tenacity.stop.stop_base):
    """Stop when the sleep before the next attempt would reach ``deadline`` (a
    ``time.monotonic()``): tenacity knows the sleep when it asks."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return time.monotonic() + (retry_state.upcoming_sleep or 0.0) >= self._deadline


def build_retrying(
    policy: RetryPolicy,
    *,
    label: str,
    retry_if: Callable[[BaseException], bool] = is_retryable,
    deadline: float | None = None,
    sleep: Callable[[float], None] | None = None,
    attempts: Attempts | None = None,
) -> tenacity.Retrying:
    """A fresh ``tenacity.Retrying`` for one call.

    Args:
        policy: Attempts, total time and back-off.
        label: Names the operation in log messages.
        retry_if: Decides whether an exception is worth another attempt.
        deadline: A ``time.monotonic()`` the caller's whole call must end by: no retry
            whose back-off would reach it.
        sleep: Sleeps each back-off (default ``time.sleep``); what it raises ends the
            call (a back-off cut short by the client's ``close()``).
        attempts: The failed attempts of the call this one is part of, if any: no
            retry once they are spent (the caller counts its failures in them).

    Returns:
        A ``Retrying`` that re-raises the last exception when it gives up. Not thread-safe;
        use it for one call only.
    """

    def log_retry(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        _log.warning(
            "%s: attempt %d failed (%s); retrying in %.3fs",
            label,
            state.attempt_number,
            error,
            state.upcoming_sleep,
        )

    stop = tenacity.stop_after_attempt(policy.max_attempts) | tenacity.stop_before_delay(
        policy.max_delay
    )
    if deadline is not None:
        stop = stop | _StopBefore(deadline)
    if attempts is not None:
        stop = stop | _StopWhenSpent(attempts)
    return tenacity.Retrying(
        sleep=time.sleep if sleep is None else sleep,
        # Before the delay, not after it: no attempt starts later than max_delay (after
        # it, the sleep before the next attempt could carry it up to ``maximum`` past).
        stop=stop,
        wait=lambda state: backoff_delay(policy, state.attempt_number),
        retry=tenacity.retry_if_exception(retry_if),
        before_sleep=log_retry,
        reraise=True,
    )


def call_with_retry(
    policy: RetryPolicy,
    label: str,
    attempt: Callable[[int], _T],
    *,
    retry_if: Callable[[BaseException], bool] = is_retryable,
    deadline: float | None = None,
    sleep: Callable[[float], None] | None = None,
    attempts: Attempts | None = None,
) -> _T:
    """Run ``attempt(attempt_number)`` until it succeeds or the policy gives up (or a
    retry's back-off would reach ``deadline``, a ``time.monotonic()``, or ``attempts``
    are spent), sleeping each back-off with ``sleep`` if given (see
    :func:`build_retrying`).

    Thread-safe: each call builds its own ``Retrying``.
    """
    retrying = build_retrying(
        policy, label=label, retry_if=retry_if, deadline=deadline, sleep=sleep, attempts=attempts
    )
    for trial in retrying:
        with trial:
            return attempt(trial.retry_state.attempt_number)
    raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover
