"""A broker's offset at the end of int64, 2**63 - 1, which no offset can follow: a read
that would ask for the next one raises a typed error (it raised ``ValueError`` from
protobuf, computing an offset that cannot be encoded)."""

from __future__ import annotations

import pytest

from liftbridge_sync import Client, ServerError, StartAt
from liftbridge_sync._wire.validate import INT64_MAX, offset_after
from liftbridge_sync.testing import FakeBroker, serve


def test_the_offset_after_the_last_one_is_a_typed_error() -> None:
    assert offset_after(0, "x") == 1
    assert offset_after(INT64_MAX - 1, "x") == INT64_MAX
    for last in (INT64_MAX, INT64_MAX + 1):
        with pytest.raises(ServerError, match="the largest an offset can be"):
            offset_after(last, "the last message read")


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_resubscribe_after_the_last_possible_offset_is_a_typed_error(transport: str) -> None:
    with FakeBroker("a") as broker:
        broker.subscribe_scripts = [
            serve([INT64_MAX - 1, INT64_MAX], ("UNAVAILABLE", "scripted: gone")),
            serve([], "hang"),
        ]
        with Client([broker.address], subscribe_transport=transport) as client:
            sub = client.subscribe("s", start=StartAt.earliest())
            assert [sub.get(5).offset, sub.get(5).offset] == [INT64_MAX - 1, INT64_MAX]
            with pytest.raises(ServerError, match=f"offset {INT64_MAX}, the largest"):
                sub.get(10)
            sub.close()


def test_a_new_only_start_after_the_last_possible_offset_is_a_typed_error() -> None:
    with FakeBroker("a") as broker:
        broker.cluster.newest_offset = INT64_MAX
        broker.cluster.high_watermark = INT64_MAX
        with Client([broker.address]) as client:
            with pytest.raises(ServerError, match="the newest message is offset"):
                client.subscribe("s", start=StartAt.new_only(), stop=None, resume=True)
