"""A call to a partition leader keeps to one retry policy's time, its metadata refreshes
included: they run within what is left of the call's ``max_delay``, not a policy each. A
single attempt keeps to its timeout, its metadata look-up included."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, ClientOptions, RetryPolicy
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport import cursors, leader
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.testing import FakeBroker
from tests.waiting import wait_until

#: As the CLI builds it: only max_delay ends the retries.
_POLICY = RetryPolicy(max_attempts=1_000_000, max_delay=2.0, initial=0.1, maximum=0.5, jitter=0)
_RPC_TIMEOUT = 1.0
#: The time given to a single attempt.
_ONCE = 0.3


def test_a_leader_call_with_no_broker_answering_ends_within_one_policy() -> None:
    # No metadata yet and a refused seed: each attempt of the leader call refreshes the
    # metadata, whose FetchMetadata retried for a policy of its own (and the leader call
    # then started another: about twice max_delay in all).
    options = ClientOptions(addresses=("127.0.0.1:1",), rpc_timeout=_RPC_TIMEOUT, retry=_POLICY)
    with Client.from_options(options) as client:
        started = time.monotonic()
        with pytest.raises(lb.BrokerUnavailableError):
            client.fetch_partition_metadata("s", 0)
        elapsed = time.monotonic() - started
    assert elapsed < _POLICY.max_delay + _RPC_TIMEOUT


@pytest.mark.parametrize("call", ["fetch_partition_metadata_once", "set_cursor_once"])
def test_a_single_attempt_keeps_to_its_timeout_when_the_metadata_is_missing(call: str) -> None:
    # The single attempts (stats() and a consumer's commit after a first failure) are
    # given what is left of their caller's time; with no metadata cached they looked the
    # leader up with a FetchMetadata retried under the whole policy.
    options = ClientOptions(addresses=("127.0.0.1:1",), rpc_timeout=_RPC_TIMEOUT, retry=_POLICY)
    core = ClientCore(options)
    try:
        started = time.monotonic()
        with pytest.raises(lb.BrokerUnavailableError):
            if call == "set_cursor_once":
                cursors.set_cursor_once(core, "c", "s", 0, 5, _ONCE)
            else:
                leader.fetch_partition_metadata_once(core, "s", 0, _ONCE)
        elapsed = time.monotonic() - started
    finally:
        core.close()
    assert elapsed < _ONCE + 0.5


def test_a_refresh_within_a_leader_call_asks_the_other_brokers_before_a_hung_one() -> None:
    # A leader that hangs (SIGSTOP) took one attempt's time; the refresh that followed
    # asked the brokers in turn, the hung one among them, whose second timeout used up
    # the rest of the call's budget (a cluster test failed so, 1 run in 2). The brokers
    # a leader call found hung are asked only when no other is known.
    from liftbridge_sync._wire import rpcs
    from tests.silent_listener import SilentListener

    silent = SilentListener()
    options = ClientOptions(
        addresses=(silent.address, "127.0.0.1:1"), rpc_timeout=_RPC_TIMEOUT, retry=_POLICY
    )
    core = ClientCore(options)
    request = api_pb2.FetchMetadataRequest()
    try:
        for _ in range(2):  # from either end of the rotation
            with pytest.raises(lb.LiftbridgeError):
                core.call_any(
                    rpcs.FETCH_METADATA,
                    request,
                    read_only=True,
                    deadline=time.monotonic() + 1.0,
                    avoid=frozenset({silent.address}),
                )
        assert silent.accepted == 0
        # Without it, the rotation reaches the hung broker.
        with pytest.raises(lb.LiftbridgeError):
            core.call_any(
                rpcs.FETCH_METADATA, request, read_only=True, deadline=time.monotonic() + 3.0
            )
        assert silent.accepted >= 1
    finally:
        core.close()
        silent.close()


class _MetadataRefused(FakeBroker):
    """Answers the first ``answered`` FetchMetadata calls, then refuses them all
    (UNAVAILABLE); a leader that says it is not the leader ``not_leader_times`` times."""

    answered = 0

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        with self.lock:
            refuse = self.metadata_calls >= self.answered
        if refuse:
            with self.lock:
                self.metadata_calls += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "going down")
        return super().FetchMetadata(request, context)


@pytest.mark.parametrize("answered", [0, 1], ids=["no-metadata", "not-leader-then-down"])
def test_a_leader_call_makes_no_more_attempts_than_the_policy_allows(answered: int) -> None:
    # The metadata refreshes within a leader call kept to its time but retried under
    # max_attempts of their own: with every FetchMetadata refused, a policy of 3
    # attempts made 3 x 3 (and a not-leader answer, then a cluster going down, 1 + 3 + 3).
    policy = RetryPolicy(max_attempts=3, max_delay=30.0, initial=0.01, maximum=0.01, jitter=0)
    broker = _MetadataRefused("a")
    broker.answered = answered
    broker.not_leader_times = 1_000
    with broker:
        with Client([broker.address], retry=policy, rpc_timeout=_RPC_TIMEOUT) as client:
            with pytest.raises(lb.LiftbridgeError):
                client.fetch_partition_metadata("s", 0)
        failed = broker.metadata_calls - answered + broker.partition_metadata_calls
    assert failed == policy.max_attempts


@pytest.mark.parametrize("call", ["fetch_partition_metadata", "fetch_cursor"])
def test_an_abort_ends_a_leader_call_backing_off_at_once(call: str) -> None:
    # A consumer's reader looked up its start position (cursor, partition metadata)
    # under the retry policy; closing the consumer did not end its back-offs (10 s
    # each here), and close() left the reader behind.
    slow = RetryPolicy(max_attempts=100, max_delay=60.0, initial=10.0, maximum=10.0, jitter=0)
    with FakeBroker() as broker:
        broker.cluster.streams = ("s", "__cursors")
        broker.not_leader_times = 1_000  # every leader call is refused: backs off
        with Client(broker.address, rpc_timeout=_RPC_TIMEOUT, retry=slow) as client:
            abort = DialAbort()
            done = threading.Event()
            failures: list[BaseException] = []

            def look_up() -> None:
                try:
                    if call == "fetch_partition_metadata":
                        leader.fetch_partition_metadata(client._core, "s", 0, abort=abort)
                    else:
                        cursors.fetch_cursor(client._core, "c", "s", 0, abort=abort)
                except BaseException as exc:  # noqa: BLE001 - what it ended with
                    failures.append(exc)
                finally:
                    done.set()

            thread = threading.Thread(target=look_up, name="test-look-up", daemon=True)
            thread.start()
            wait_until(lambda: broker.partition_metadata_calls >= 1, 10, "a first attempt")
            aborted = time.monotonic()
            abort.abort()
            assert done.wait(5)
            took = time.monotonic() - aborted
    assert [type(f) for f in failures] == [lb.ClientClosedError], failures
    assert took < 1.0, took  # not the back-off (10 s)
