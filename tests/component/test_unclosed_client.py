"""A client dropped without close() says so, as an unclosed file or socket does."""

from __future__ import annotations

import gc
import threading
import warnings
from collections.abc import Iterator

import pytest

from liftbridge_sync import Client
from liftbridge_sync.testing import FakeBroker


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    with FakeBroker() as server:
        yield server


def _ours() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("liftbridge-")}


def test_a_client_dropped_holding_connections_warns(fake: FakeBroker) -> None:
    before = _ours()
    client = Client(fake.address)
    client.publish("s", b"x")  # a channel, the publish stream and its threads
    session = client._session
    assert _ours() - before
    with pytest.warns(ResourceWarning, match=r"unclosed <Client .* open>"):
        del client
        gc.collect()
    # What it holds is still open (nothing of it may be in use by then): only close()
    # releases it.
    assert _ours() - before
    session.close(None)
    assert not _ours() - before


def test_a_client_closed_or_never_used_drops_silently(fake: FakeBroker) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Client(fake.address) as client:
            client.publish("s", b"x")
        del client
        unused = Client(fake.address)
        del unused
        gc.collect()
