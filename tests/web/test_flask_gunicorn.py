"""examples/flask_app.py under a real gunicorn: sync (with and without --preload), gthread."""

from __future__ import annotations

import collections
import re

import pytest

from liftbridge_sync import Client
from tests.web.conftest import read_stream
from tests.web.gunicorn import ROOT, Gunicorn

pytestmark = pytest.mark.integration

REQUESTS = 1500
ASYNC_REQUESTS = 200

CONFIGS = {
    "sync": ["-k", "sync", "-w", "3"],
    "sync-preload": ["-k", "sync", "-w", "3", "--preload"],
    "gthread": ["-k", "gthread", "-w", "2", "--threads", "8"],
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_flask_example_under_gunicorn(
    config: str, web_stream: str, liftbridge_address: str, liftbridge_client: Client
) -> None:
    env = {"LIFTBRIDGE_ADDRESSES": liftbridge_address, "EXAMPLE_STREAM": web_stream}
    bodies = [f"{config}-{i}".encode() for i in range(REQUESTS)]
    later = [f"{config}-async-{i}".encode() for i in range(ASYNC_REQUESTS)]
    with Gunicorn("flask_app:app", CONFIGS[config], chdir=ROOT / "examples", env=env) as server:
        server.wait_ready()
        answers = server.hammer("/messages", bodies)
        accepted = server.hammer("/messages/async", later)
        assert server.stop() == 0, server.log
        log = server.log

    assert [status for status, _ in answers] == [200] * REQUESTS, answers[:3]
    assert [status for status, _ in accepted] == [202] * ASYNC_REQUESTS
    # One client per worker process, reused by every request it served.
    clients_by_pid = collections.defaultdict(set)
    for _, answer in answers:
        clients_by_pid[answer["pid"]].add(answer["client"])
    assert len(clients_by_pid) >= 2, "only one worker served requests"
    assert all(len(ids) == 1 for ids in clients_by_pid.values()), clients_by_pid

    # Every acked message is in the stream exactly where its ack said, with its body;
    # the fire-and-forget ones were flushed when the workers exited; nothing twice.
    stored = read_stream(liftbridge_client, web_stream)
    for body, (_, answer) in zip(bodies, answers, strict=True):
        assert stored.get((answer["partition"], answer["offset"])) == body
    assert sorted(stored.values()) == sorted(bodies + later)
    assert {partition for partition, _ in stored} == {0, 1}

    assert "Traceback" not in log and "WORKER TIMEOUT" not in log, log
    booted = set(re.findall(r"Booting worker with pid: (\d+)", log))
    exited = set(re.findall(r"Worker exiting \(pid: (\d+)\)", log))
    assert booted and booted == exited, log
    assert "Shutting down: Master" in log
