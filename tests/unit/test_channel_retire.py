"""Channels to brokers that left the cluster are closed once the metadata says so.

Driven through the client core's metadata path with channels that only record whether
they were closed (the real cluster's version is in tests/integration/test_cluster_client.py).
"""

from __future__ import annotations

from typing import Any, cast

import grpc
import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport import roster as roster_module
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync.errors import BrokerUnavailableError
from liftbridge_sync.options import ClientOptions
from tests.waiting import wait_until


class _Channel:
    """Stands in for a grpcio channel: stubs can be made on it; it records close()."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.closed = False

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return lambda *a, **k: None

    unary_stream = stream_unary = stream_stream = unary_unary

    def close(self) -> None:
        self.closed = True


def _core() -> tuple[ClientCore, list[_Channel]]:
    made: list[_Channel] = []

    def factory(address: str, options: list[tuple[str, Any]]) -> grpc.Channel:
        made.append(_Channel(address))
        return cast(grpc.Channel, made[-1])

    core = ClientCore(ClientOptions(addresses=("seed:1",)), channel_factory=factory)
    core.roster.departed_after = 0.0  # at the first answer without the broker (see below)
    return core, made


def _brokers(*addresses: str) -> api_pb2.FetchMetadataResponse:
    return api_pb2.FetchMetadataResponse(
        brokers=[
            api_pb2.Broker(id=a, host=a.split(":")[0], port=int(a.split(":")[1])) for a in addresses
        ]
    )


def _use(core: ClientCore, *addresses: str) -> None:
    for address in addresses:
        core.pool.release(core.pool.stub(address))


def test_a_broker_gone_from_the_metadata_has_its_idle_channels_closed() -> None:
    core, made = _core()
    _use(core, "seed:1", "a:1", "b:1")
    core.pool.release(core.pool.stub("b:1", streaming_reads=True))
    assert len(made) == 4
    core.adopt_metadata(_brokers("a:1", "c:1"))  # b replaced by c; the seed stays
    assert [c.address for c in made if c.closed] == ["b:1", "b:1"]
    assert core.pool.addresses() == ("a:1", "seed:1")
    # Back at that address later: a new channel.
    _use(core, "b:1")
    assert len(made) == 5 and not made[-1].closed
    core.close()
    assert all(c.closed for c in made)


def test_a_partial_metadata_answer_retires_too_and_an_empty_list_retires_nothing() -> None:
    core, made = _core()
    _use(core, "a:1", "b:1")
    core.metadata.merge(core._metadata_of(api_pb2.FetchMetadataResponse()))
    assert not any(c.closed for c in made)
    core.metadata.merge(core._metadata_of(_brokers("a:1")))
    assert [c.address for c in made if c.closed] == ["b:1"]
    core.close()


def test_a_channel_with_a_call_under_way_is_closed_when_the_call_ends() -> None:
    core, made = _core()
    stub = core.pool.stub("b:1")  # a call in progress (not released)
    _use(core, "b:1")  # and one that ended
    core.adopt_metadata(_brokers("a:1"))
    assert not made[0].closed
    assert core.pool.addresses() == ("b:1",)  # still open, for that call
    assert core.pool.opened
    # New calls to the address do not use the retired channel.
    _use(core, "b:1")
    assert len(made) == 2
    core.pool.release(stub)
    assert made[0].closed
    core.pool.release(stub)  # a second release of a closed one: nothing
    core.close()


def test_close_closes_a_retired_channel_still_in_use() -> None:
    core, made = _core()
    core.pool.stub("b:1")
    core.adopt_metadata(_brokers("a:1"))
    assert not made[0].closed
    core.close()
    assert made[0].closed


def test_a_broker_missing_from_answers_for_a_moment_keeps_its_channels() -> None:
    # A v1.9.0 broker lists only the peers that answered its survey in time: one that
    # restarts, or is slow for a moment, is left out of an answer or two. Its channels
    # are closed only once it has been missing from every answer for departed_after.
    core, made = _core()
    core.roster.departed_after = 30.0
    _use(core, "a:1", "b:1")
    core.adopt_metadata(_brokers("a:1"))
    core.adopt_metadata(_brokers("a:1", "b:1"))  # back: its clock starts over
    assert core.roster.absent_since == {}
    core.adopt_metadata(_brokers("a:1"))
    assert not any(c.closed for c in made)
    core.roster.absent_since["b:1"] -= 31.0  # missing from every answer for 31 s
    core.adopt_metadata(_brokers("a:1"))
    assert [c.address for c in made if c.closed] == ["b:1"]
    assert core.roster.absent_since == {}
    core.close()


def test_the_tls_verdicts_of_departed_brokers_are_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plaintext connection a broker closed at connect makes the client ask that port
    # whether it speaks TLS, and the answer is kept: one per address ever seen grew for
    # good under rolling replacements (a new address each time).
    asked: list[str] = []

    def speaks_tls(peer: tuple[str, int], timeout: float, abort: object = None) -> str | None:
        asked.append(f"{peer[0]}:{peer[1]}")
        return None

    monkeypatch.setattr(roster_module, "speaks_tls", speaks_tls)
    core, _ = _core()
    closed = BrokerUnavailableError("Subscribe: closed", details="Socket closed")
    for n in range(200):
        address = f"b{n}:1"
        _use(core, address)
        core.roster.tls_required(address, closed)
        core.adopt_metadata(_brokers(address))  # b{n-1} replaced by b{n}
    assert len(asked) == 200
    assert set(core.roster.tls_verdicts) <= {"b199:1", "seed:1"}
    # A broker back at an address it left is asked again; one still listed is not.
    _use(core, "b0:1")
    core.roster.tls_required("b0:1", closed)
    core.roster.tls_required("b199:1", closed)
    assert asked[200:] == ["b0:1"]
    core.close()


def test_a_release_later_takes_no_lock_and_the_next_pool_operation_closes_the_channel() -> None:
    # What a subscribe call's finalizer does: the collector may run it on a thread
    # that holds the pool's (non-reentrant) lock.
    core, made = _core()
    pool = core.pool
    releaser = pool.releaser(pool.stub("a:1", streaming_reads=True))
    assert pool.retire(()) == ["a:1"]
    with pool._lock:
        releaser.later()  # would deadlock if it took the lock
    releaser()  # given back once only
    assert not made[0].closed
    assert pool.addresses() == ()  # the next operation released and closed it
    assert made[0].closed


def test_a_release_later_closes_a_retired_channel_without_another_call() -> None:
    # A dropped subscribe call gives its departed broker's channel back from a
    # finalizer; a client that made no call after it kept the channel until close().
    # The timer thread every subscription starts gives it back within half a second.
    core, made = _core()
    pool = core.pool
    core.scheduler()  # as each partition subscription starts it
    releaser = pool.releaser(pool.stub("a:1", streaming_reads=True))
    core.adopt_metadata(_brokers("b:1"))  # a departed, its channel still in use
    assert not made[0].closed
    releaser.later()  # the call's finalizer; no call follows
    wait_until(lambda: made[0].closed, 5.0, "the retired channel closed")
    core.close()
