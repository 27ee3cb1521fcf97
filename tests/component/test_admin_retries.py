"""CreateStream and DeleteStream retried after an answer was lost, against the fake
broker: they are not idempotent, so the retry's "exists" / "not found" must say that an
earlier attempt of the same call may have done it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client
from liftbridge_sync.testing import AdminScript, FakeBroker
from tests.constants import FAST_RETRY


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with FakeBroker() as server:
        yield server


def _first_lost(then: str) -> AdminScript:
    return lambda method, count: "lost" if count == 1 else then


def test_create_stream_after_a_lost_answer_says_it_may_have_made_it(fake: FakeBroker) -> None:
    fake.admin_script = _first_lost("exists")
    with Client([fake.address], retry=FAST_RETRY) as client:
        with pytest.raises(lb.StreamExistsError) as caught:
            client.create_stream("s", "s")
    assert fake.admin_calls == ["CreateStream", "CreateStream"]
    message = str(caught.value)
    assert "an earlier attempt of this call may have created it" in message
    assert "Socket closed" in message
    assert caught.value.code == "ALREADY_EXISTS"


def test_create_stream_exist_ok_after_a_lost_answer_is_false(fake: FakeBroker) -> None:
    fake.admin_script = _first_lost("exists")
    with Client([fake.address], retry=FAST_RETRY) as client:
        assert client.create_stream("s", "s", exist_ok=True) is False


def test_a_name_taken_at_the_first_attempt_is_a_plain_exists(fake: FakeBroker) -> None:
    fake.admin_script = lambda method, count: "exists"
    with Client([fake.address], retry=FAST_RETRY) as client:
        with pytest.raises(lb.StreamExistsError) as caught:
            client.create_stream("s", "s")
    assert "earlier attempt" not in str(caught.value)


def test_delete_stream_after_a_lost_answer_says_it_may_have_deleted_it(
    fake: FakeBroker,
) -> None:
    fake.admin_script = _first_lost("missing")
    with Client([fake.address], retry=FAST_RETRY) as client:
        with pytest.raises(lb.NoSuchStreamError) as caught:
            client.delete_stream("s")
    assert fake.admin_calls == ["DeleteStream", "DeleteStream"]
    assert "an earlier attempt of this call may have deleted it" in str(caught.value)


def test_an_attempt_that_never_connected_counts_for_nothing(fake: FakeBroker) -> None:
    # The first seed refuses connections: that attempt cannot have created anything.
    fake.admin_script = lambda method, count: "exists"
    with Client(["127.0.0.1:1", fake.address], retry=FAST_RETRY) as client:
        for _ in range(2):  # whichever seed the rotation starts with
            with pytest.raises(lb.StreamExistsError) as caught:
                client.create_stream("s", "s")
            assert "earlier attempt" not in str(caught.value)
