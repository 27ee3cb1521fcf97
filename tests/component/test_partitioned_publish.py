"""Placing messages with a partitioner reads the partition count from the metadata cache.

One look-up per message: it must stay a cache read, not a trip through the retry
machinery (whose set-up cost as much as the rest of a keyed ``publish_batch``).
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from liftbridge_sync import ByKey, Client
from liftbridge_sync._transport import core as core_module
from liftbridge_sync._transport.retry import call_with_retry
from liftbridge_sync.testing import FakeBroker, FakeCluster
from tests.constants import FAST_RETRY


def test_a_partitioner_reads_the_count_from_the_cache_after_the_first_look_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    retried: list[str] = []

    def counting(policy: Any, what: str, *args: Any, **kwargs: Any) -> Any:
        retried.append(what)
        return call_with_retry(policy, what, *args, **kwargs)

    monkeypatch.setattr(core_module, "call_with_retry", counting)
    with FakeBroker("a", FakeCluster(leader="a", partitions=3)) as broker:
        with Client([broker.address], retry=FAST_RETRY) as client:
            keys = [b"k%d" % i for i in range(200)]
            outcomes = client.publish_batch("s", [(k, b"v") for k in keys], partitioner=ByKey())
            for key in keys[:20]:
                client.publish_async("s", b"v", key=key, partitioner=ByKey()).result(10)
    assert [ack.partition for ack in outcomes] == [zlib.crc32(k) % 3 for k in keys]  # type: ignore[union-attr]
    assert retried.count("partition count") <= 1
    assert broker.metadata_calls <= 2
