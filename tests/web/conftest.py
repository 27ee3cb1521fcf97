"""Fixtures for the web framework tests: a stream per test, checked after the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from liftbridge_sync import Client, NoSuchStreamError, StartAt, StopAt
from tests.integration.conftest import unique


@pytest.fixture
def web_stream(liftbridge_client: Client) -> Iterator[str]:
    """A stream name for the app to create (it does so itself); deleted afterwards."""
    name = unique("web")
    yield name
    try:
        liftbridge_client.delete_stream(name)
    except NoSuchStreamError:
        pass


def read_stream(client: Client, stream: str) -> dict[tuple[int, int], bytes]:
    """Every message of every partition, by ``(partition, offset)``."""
    info = client.fetch_metadata(stream).streams[stream]
    found: dict[tuple[int, int], bytes] = {}
    for partition in info.partitions:
        newest = client.fetch_partition_metadata(stream, partition).newest_offset
        if newest < 0:
            continue
        with client.subscribe(
            stream, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
        ) as sub:
            for message in sub:
                found[(partition, message.offset)] = message.value
    return found
