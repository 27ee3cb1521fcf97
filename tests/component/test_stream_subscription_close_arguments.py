"""A whole-stream subscription's ``close(timeout)`` with a timeout it cannot take (negative,
NaN, no number) raises the typed error and still closes: it raised before closing
anything, which left every reader thread running, each with its call, though the caller
had asked for the end (in a ``finally`` block, where the error is the only trace)."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from liftbridge_sync import Client, StartAt
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.testing import FakeBroker, FakeCluster, serve


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(-1, ConfigurationError), (math.nan, ConfigurationError), ("1", ArgumentTypeError)],
    ids=["negative", "nan", "str"],
)
def test_close_with_a_bad_timeout_raises_typed_and_closes(
    timeout: Any, error: type[ConfigurationError]
) -> None:
    with FakeBroker("a", FakeCluster(leader="a", partitions=2)) as broker:
        broker.subscribe_scripts = [serve([0], "hang"), serve([0], "hang")]
        with Client([broker.address]) as client:
            sub = client.subscribe_stream("s", start=StartAt.earliest())
            assert sub.get(10).offset == 0
            with pytest.raises(error, match="'timeout'"):
                sub.close(timeout)
            assert sub.closed
            readers = [
                t for t in threading.enumerate() if t.name.startswith("liftbridge-subscribe-s-")
            ]
            assert readers == []
            with pytest.raises(StopIteration):
                sub.get(0)
            sub.close()  # idempotent
