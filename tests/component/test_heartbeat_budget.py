"""A consumer's poll of its coordinator (the heartbeat) keeps to its call timeout, the
metadata refresh it makes for a coordinator the cache does not list included: retried
under the whole retry policy, it made the poll overrun the server's consumer timeout,
which then expired the member."""

from __future__ import annotations

import threading
import time

import pytest

import liftbridge_sync as lb
from liftbridge_sync import ClientOptions, RetryPolicy
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.consumer._membership import Membership
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.models import BrokerInfo, FrozenMap, Metadata

#: Only max_delay ends the retries: a refresh under it takes 2 s with no broker up.
_POLICY = RetryPolicy(max_attempts=1_000_000, max_delay=2.0, initial=0.1, maximum=0.5, jitter=0)
#: A heartbeat call's time (a quarter of a 1.2 s consumer timeout).
_CALL_TIMEOUT = 0.3
#: The heartbeat's interval (0.4 of that consumer timeout).
_INTERVAL = 0.48


def test_a_poll_for_a_coordinator_the_metadata_lacks_keeps_to_its_timeout() -> None:
    options = ClientOptions(addresses=("127.0.0.1:1",), rpc_timeout=1.0, retry=_POLICY)
    core = ClientCore(options)
    try:
        # Metadata cached, but without the coordinator (a broker that was down when it
        # was read): the poll refreshes it, and no broker answers.
        core.metadata.store(Metadata(brokers=(), streams=FrozenMap({})))
        member = Membership(core, "g", "m", ["s"], threading.Lock(), Counters())
        member.coordinator, member.epoch = "n9", 1
        member._call_timeout = _CALL_TIMEOUT
        started = time.monotonic()
        with pytest.raises(lb.LiftbridgeError):
            member.poll()
        elapsed = time.monotonic() - started
    finally:
        core.close()
    assert elapsed < _CALL_TIMEOUT + 0.5


def test_a_heartbeat_round_with_no_broker_answering_keeps_to_its_interval() -> None:
    # Every broker refuses (UNAVAILABLE, retryable): the round polls, asks the metadata
    # leader for the coordinator, reports the silent coordinator and asks again. Each of
    # those calls was bounded per attempt but retried under the whole retry policy (2 s
    # each here), so one round took ~6 s, past the consumer timeout (1.2 s).
    options = ClientOptions(addresses=("127.0.0.1:1",), rpc_timeout=1.0, retry=_POLICY)
    core = ClientCore(options)
    try:
        core.metadata.store(
            Metadata(
                brokers=(BrokerInfo(id="n9", host="127.0.0.1", port=1),), streams=FrozenMap({})
            )
        )
        member = Membership(core, "g", "m", ["s"], threading.Lock(), Counters())
        member.coordinator, member.epoch = "n9", 1
        member._call_timeout = _CALL_TIMEOUT
        member._interval = _INTERVAL
        member._coordinator_timeout = 0.1
        member.heard_at = time.monotonic() - 10  # silent: the round reports it too
        stop = threading.Event()
        tended: list[float] = []

        def tend() -> None:  # called before each poll: the second one ends the test
            tended.append(time.monotonic())
            if len(tended) == 2:
                stop.set()

        def unexpected(*args: object) -> None:
            raise AssertionError(f"unexpected call {args}")

        worker = threading.Thread(
            target=member.heartbeat, args=(stop, unexpected, unexpected, None, tend)
        )
        worker.start()
        worker.join(30)
        assert not worker.is_alive()
    finally:
        core.close()
    # The round, then its retry wait (at most the interval).
    took = tended[1] - tended[0]
    assert took < 2 * _INTERVAL + 0.5, took
