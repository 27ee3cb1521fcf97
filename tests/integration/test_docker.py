"""The testcontainers backend, exercised when a Docker engine is reachable.

On machines without an engine (CI here) this test is skipped and the reason names the
engine problem; the real-binary backend covers everything else.
"""

from __future__ import annotations

import pytest

from liftbridge_sync import Client, StartAt, StopAt
from liftbridge_sync.testing import DockerLiftbridgeServer, docker_unavailable_reason

pytestmark = pytest.mark.integration


def test_docker_backend_serves_a_working_liftbridge() -> None:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(f"testcontainers backend not run: {reason}")
    with DockerLiftbridgeServer() as server, Client(server.address) as client:
        client.create_stream("docker-smoke", "docker-smoke")
        client.publish("docker-smoke", b"from a container", headers={"h": b"1"})
        with client.subscribe(
            "docker-smoke", start=StartAt.earliest(), stop=StopAt.latest()
        ) as sub:
            (message,) = list(sub)
        assert (message.value, message.headers["h"]) == (b"from a container", b"1")
        client.set_cursor("c", "docker-smoke", 0, 0)
        assert client.fetch_cursor("c", "docker-smoke", 0) == 0
