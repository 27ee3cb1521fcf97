"""A done-callback that calls ``sys.exit()`` ends neither the client's thread that runs
it nor publishing: on a thread that is not the main one it could only have ended that
thread, and with it publishing for every thread sharing the client
(``InternalThreadError`` from then on). It is logged as a callback's exception is."""

from __future__ import annotations

import logging
import sys
from concurrent.futures import Future

import pytest

from liftbridge_sync import Ack, Client
from liftbridge_sync.testing import FakeBroker


def test_a_callback_calling_sys_exit_is_logged_and_publishing_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    called: list[int] = []

    def leave(future: Future[Ack | None]) -> None:
        called.append(1)
        sys.exit(0)

    with FakeBroker("a") as broker, Client([broker.address]) as client:
        # Acks held back: every callback is added before its future resolves, so each
        # runs on the client's thread (one added to a resolved future runs here).
        broker.publish_script = lambda request, count: ("delay", 1.0) if count == 1 else "ack"
        futures = [client.publish_async("s", b"%d" % i) for i in range(50)]
        with caplog.at_level(logging.ERROR, logger="liftbridge_sync.publisher"):
            for future in futures:
                future.add_done_callback(leave)
            offsets = sorted(f.result(10).offset for f in futures)  # type: ignore[union-attr]
            assert offsets == list(range(50))
            client.flush(10)
        ack = client.publish("s", b"after")  # the publisher's threads are alive
        assert ack is not None and ack.offset == 50
    assert len(called) == 50
    logged = [r for r in caplog.records if "exception calling callback" in r.getMessage()]
    assert logged and all(r.exc_info and r.exc_info[0] is SystemExit for r in logged)
