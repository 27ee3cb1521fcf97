"""The publish stream a client publishes on, for tests that reach into it."""

from __future__ import annotations

from liftbridge_sync import Client
from liftbridge_sync._transport.h2 import connection


def live_h2_stream(client: Client) -> connection.H2PublishStream:
    """The client's open ``"h2"`` publish stream (the client has published)."""
    publisher = client._publisher
    assert publisher is not None
    stream = publisher._table.live
    assert isinstance(stream, connection.H2PublishStream)
    return stream
