"""How often an ``"h2"`` subscription may PING a quiet broker (``_ping_policy``)."""

from __future__ import annotations

from liftbridge_sync._transport.h2_subscribe import _ping_policy
from liftbridge_sync.options import ClientOptions


def test_a_silent_subscription_keeps_pinging_at_the_brokers_spacing() -> None:
    policy = _ping_policy(ClientOptions(addresses=("a:1",), keepalive_interval=0.05))
    # grpc-go's 5 minutes and a second of slack; unlike a publish connection, no cap on
    # PINGs without data: a dead connection under a quiet stream must still be noticed.
    assert (policy.min_interval, policy.max_without_data) == (301.0, 0)
    for _ in range(5):
        policy.pinged()
        assert not policy.may_ping()
    policy.data_received()
    assert policy.may_ping()


def test_grpc_options_describe_a_laxer_broker() -> None:
    options = ClientOptions(
        addresses=("a:1",),
        grpc_options=(
            ("grpc.http2.min_time_between_pings_ms", 10_000),
            ("grpc.http2.max_pings_without_data", 3),
        ),
    )
    policy = _ping_policy(options)
    assert (policy.min_interval, policy.max_without_data) == (11.0, 3)
