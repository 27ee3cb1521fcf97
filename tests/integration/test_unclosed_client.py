"""A client dropped without close() says so, as an unclosed file or socket does."""

from __future__ import annotations

import gc
import threading
import warnings

import pytest

from liftbridge_sync import Client

from .conftest import unique

pytestmark = pytest.mark.integration


def _ours() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("liftbridge-")}


def test_a_client_dropped_holding_connections_warns(liftbridge_address: str) -> None:
    before = _ours()
    client = Client(liftbridge_address)
    stream = unique("unclosed")
    client.create_stream(stream, stream)
    client.publish(stream, b"x")  # a channel, the publish stream and its threads
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


def test_a_client_closed_or_never_used_drops_silently(liftbridge_address: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Client(liftbridge_address) as client:
            stream = unique("closed")
            client.create_stream(stream, stream)
            client.publish(stream, b"x")
        del client
        unused = Client(liftbridge_address)
        del unused
        gc.collect()
