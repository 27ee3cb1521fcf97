"""A blocking call whose own timeout runs out raises ``WaitTimeoutError``: a
``LiftbridgeError`` (the library's errors are one tree) and a ``TimeoutError`` (what
these calls have always raised, so ``except TimeoutError`` keeps working)."""

from __future__ import annotations

import pytest

from liftbridge_sync import Client, LiftbridgeError, StartAt, WaitTimeoutError
from liftbridge_sync.testing import FakeBroker, serve


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_read_that_times_out_is_typed_and_the_subscription_reads_on(transport: str) -> None:
    with FakeBroker("a") as broker:
        broker.subscribe_scripts = [serve([0], "hang")]
        with Client([broker.address], subscribe_transport=transport) as client:
            with client.subscribe("s", start=StartAt.earliest()) as sub:
                assert sub.get(5).offset == 0
                for read in (lambda: sub.get(0.05), lambda: sub.get_many(3, 0.05)):
                    with pytest.raises(WaitTimeoutError) as caught:
                        read()
                    assert isinstance(caught.value, LiftbridgeError | TimeoutError)
                    assert isinstance(caught.value, TimeoutError)


def test_a_flush_with_publishes_pending_is_typed() -> None:
    with FakeBroker("a") as broker:
        broker.publish_script = lambda request, count: "store"  # never acknowledged
        with Client([broker.address], ack_timeout=30.0) as client:
            future = client.publish_async("s", b"x")
            with pytest.raises(WaitTimeoutError, match="1 publishes still pending"):
                client.flush(timeout=0.2)
            assert not future.done()
