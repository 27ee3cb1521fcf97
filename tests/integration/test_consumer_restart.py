"""Consumer groups across a restart of the server (its own server: it restarts it)."""

from __future__ import annotations

import pytest

from liftbridge_sync import Client, Consumer, StartAt
from liftbridge_sync.testing import LiftbridgeServer
from tests.waiting import wait_until

from .conftest import unique


def _read(consumer: Consumer, n: int) -> list[bytes]:
    wait_until(lambda: len(consumer.assignment()) == 1, 15, "assignment")
    return [consumer.get(10).value for _ in range(n)]


@pytest.mark.parametrize("kill", [False, True], ids=["SIGINT", "SIGKILL"])
def test_a_group_resumes_after_a_restart_from_what_it_committed_just_before(
    kill: bool,
) -> None:
    """Positions committed in the seconds before the server stopped are where the
    group goes on: v1.9.0 alone would read them back as "no cursor" (its high
    watermark checkpoint lags up to 5 s), and the member would start the partition
    over from ``start``, handing every message out again."""
    with LiftbridgeServer() as server:
        stream, group = unique(), unique("g")
        start = StartAt.earliest()
        with Client(server.address) as client:
            client.create_stream(stream, stream)
            first = [b"first-%d" % i for i in range(30)]
            for value in first:
                client.publish(stream, value)
            with client.consumer(group, streams=[stream], auto_commit=None, start=start) as a:
                assert _read(a, 30) == first
                assert a.commit() == {(stream, 0): 29}
        server.restart(kill=kill)
        with Client(server.address) as client:
            second = [b"second-%d" % i for i in range(10)]
            for value in second:
                client.publish(stream, value)
            with client.consumer(group, streams=[stream], auto_commit=None, start=start) as b:
                assert _read(b, 10) == second
                with pytest.raises(TimeoutError):
                    b.get(0.5)  # nothing after them either
