"""A metadata refresh that waits for another thread's keeps to its own caller's time.

A refresh asked for without a budget (a first ``metadata.get()``) waited for another
thread's refresh under way without a bound, then fetched under a whole retry policy of
its own: up to twice its policy's time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import liftbridge_sync as lb
from liftbridge_sync import ClientOptions, RetryPolicy
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.retry import Budget
from tests.silent_listener import SilentListener
from tests.waiting import wait_until

_POLICY = RetryPolicy(max_attempts=1_000_000, max_delay=4.0, initial=0.05, maximum=0.1, jitter=0)
_RPC_TIMEOUT = 0.5
#: The most the refresh without a budget may take: one policy, and scheduling slack.
_BOUND = _POLICY.max_delay + _RPC_TIMEOUT + 2.0
#: The other thread's budget: far longer than one policy.
_LONG = 30.0


def test_a_refresh_without_a_budget_waits_for_another_no_longer_than_its_policy() -> None:
    silent = SilentListener()
    options = ClientOptions(addresses=(silent.address,), rpc_timeout=_RPC_TIMEOUT, retry=_POLICY)
    core = ClientCore(options)
    errors: dict[str, BaseException] = {}

    def run(name: str, call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - recorded for the asserts
            errors[name] = exc

    now = time.monotonic()
    long_budget = Budget(now + _LONG, now + _LONG)
    long = threading.Thread(
        target=run, args=("long", lambda: core.fetch_metadata((), long_budget)), daemon=True
    )
    short = threading.Thread(target=run, args=("short", core.metadata.get), daemon=True)
    try:
        long.start()
        wait_until(lambda: silent.accepted >= 1, what="the long refresh dialling")
        started = time.monotonic()
        short.start()
        short.join(_BOUND + 10.0)
        elapsed = time.monotonic() - started
        assert not short.is_alive(), "the refresh without a budget never ended"
        assert elapsed < _BOUND, f"took {elapsed:.1f}s: more than its policy"
        assert isinstance(errors.get("short"), lb.DeadlineExceededError | lb.BrokerUnavailableError)
    finally:
        core.close()
        long.join(10)
        short.join(10)
        silent.close()
    assert not long.is_alive()
    assert isinstance(errors.get("long"), lb.LiftbridgeError)
