"""Consumer groups across a restart of the server (its own server: it restarts it)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from liftbridge_sync import Client, Consumer, StartAt
from liftbridge_sync._transport import cursors
from liftbridge_sync._transport.core import ClientCore
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


def test_a_member_reading_from_the_end_loses_nothing_when_its_first_start_fails_on_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a probe: a member given a partition without a cursor (new-only, with
    auto-commit) whose reader's first start failed (the server restarted under it: no
    ``__cursors`` stream yet) looked the partition's end up again at the next poll,
    after the messages published meanwhile, and stored that end as the group's cursor:
    no member ever read them. The end is pinned once per assignment, before the cursor
    fetch, and the restarted reader starts there."""
    group = unique("g")
    fetch_cursor = cursors.fetch_cursor
    fetching = threading.Event()
    go = threading.Event()

    def held(core: ClientCore, cursor_id: str, stream: str, partition: int, **kw: Any) -> int:
        # Holds the reader's first cursor fetch while the server restarts, so that the
        # fetch meets the restarted server, as it does when the restart comes first.
        if cursor_id == f"__group:{group}" and not fetching.is_set():
            fetching.set()
            go.wait(60)
        return fetch_cursor(core, cursor_id, stream, partition, **kw)

    monkeypatch.setattr(cursors, "fetch_cursor", held)
    with LiftbridgeServer() as server:
        stream = unique()
        with Client(server.address) as client:
            client.create_stream(stream, stream)
            for i in range(10):
                client.publish(stream, b"old-%d" % i)
            consumer = client.consumer(
                group, streams=[stream], auto_commit=0.3, start=StartAt.new_only()
            )
            try:
                assert consumer.wait_for_assignment(15) == {(stream, 0)}
                assert fetching.wait(15)
                server.restart()
                sent = [b"new-%d" % i for i in range(5)]
                acks = [client.publish(stream, v) for v in sent]
                assert [a.offset for a in acks if a is not None] == [10, 11, 12, 13, 14]
                go.set()
                assert [consumer.get(20).value for _ in sent] == sent
                with pytest.raises(TimeoutError):
                    consumer.get(0.5)  # nothing twice (and the last one processed)
            finally:
                go.set()
                consumer.close()
            assert client.fetch_cursor(f"__group:{group}", stream, 0) == 14
