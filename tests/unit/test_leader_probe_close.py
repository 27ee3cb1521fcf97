"""Closing the publisher while the leader probe looks at many silent partitions.

Each look may take up to its timeout (a leader that drops packets). ``close()`` must
not wait for every look of the batch: the probe abandons the rest after the look it is
in, and the publisher fails its pending publishes before it waits for the probe.
"""

from __future__ import annotations

import threading
import types
from typing import Any, cast

from liftbridge_sync._publishing.failover import THREAD_NAME, LeaderProbe
from liftbridge_sync.errors import DeadlineExceededError


class _Core:
    """A leader that never answers: each look lasts until its timeout, or until the
    probe is told to stop (so the test need not sit through the timeouts)."""

    def __init__(self) -> None:
        self.looks = 0
        self.first_look = threading.Event()
        self.stop: threading.Event | None = None
        leader = types.SimpleNamespace(address="10.0.0.1:9292")
        cluster = types.SimpleNamespace(
            partition=lambda s, p: types.SimpleNamespace(leader="b", stream=s, id=p),
            broker=lambda broker_id: leader,
        )
        self.metadata = types.SimpleNamespace(snapshot=None, get=lambda: cluster)

    def refresh_once(self, streams: list[str], deadline: float) -> None:
        return None

    def invoke(self, address: str, rpc: object, request: object, **kwargs: Any) -> object:
        self.looks += 1
        self.first_look.set()
        assert self.stop is not None
        self.stop.wait(kwargs["timeout"])
        raise DeadlineExceededError("the leader did not answer")


def test_close_abandons_the_looks_not_yet_made() -> None:
    core = _Core()
    probe = LeaderProbe(cast(Any, core), lambda result: None)
    core.stop = probe._stop
    # Queued before the probe thread exists (the last request starts it), so that the
    # thread takes all six as one batch.
    for partition in range(5):
        probe._requests.put((("orders", partition), 0.0))
    probe.request(("orders", 5), 0.0)
    assert core.first_look.wait(10)
    probe.close()
    assert core.looks == 1
    assert not any(t.name == THREAD_NAME for t in threading.enumerate())
