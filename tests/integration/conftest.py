"""Shared helpers for tests against the real Liftbridge server."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from liftbridge_sync import Client, NoSuchStreamError

StreamFactory = Callable[..., str]


def unique(prefix: str = "t") -> str:
    """A stream name no other test uses (also valid as a NATS subject)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_stream(liftbridge_client: Client) -> Iterator[StreamFactory]:
    """Create streams (subject = name) for one test and delete them afterwards."""
    created: list[str] = []

    def make(partitions: int = 1, **options: object) -> str:
        name = unique()
        liftbridge_client.create_stream(name, name, partitions=partitions, **options)  # type: ignore[arg-type]
        created.append(name)
        return name

    yield make
    if not liftbridge_client.closed:
        for name in created:
            try:
                liftbridge_client.delete_stream(name)
            except NoSuchStreamError:
                pass
