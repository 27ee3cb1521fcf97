"""One gunicorn run of an example app: drive it, stop it with SIGTERM, check the stream."""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from pathlib import Path

from liftbridge_sync import Client
from tests.web.conftest import read_stream
from tests.web.gunicorn import Gunicorn


def drive_and_check(
    app: str,
    args: Sequence[str],
    *,
    chdir: Path,
    env: dict[str, str],
    client: Client,
    stream: str,
    requests: int,
    async_requests: int,
) -> None:
    """Run ``app``, POST ``requests`` bodies to /messages and ``async_requests`` to
    /messages/async concurrently, SIGTERM gunicorn, then check everything arrived."""
    tag = "-".join(args)
    bodies = [f"{tag}-{i}".encode() for i in range(requests)]
    later = [f"{tag}-async-{i}".encode() for i in range(async_requests)]
    with Gunicorn(app, args, chdir=chdir, env=env) as server:
        server.wait_ready()
        answers = server.hammer("/messages", bodies)
        accepted = server.hammer("/messages/async", later)
        assert server.stop() == 0, server.log
        log = server.log

    assert [status for status, _ in answers] == [200] * requests, answers[:3]
    assert [status for status, _ in accepted] == [202] * async_requests, accepted[:3]
    # One client per worker process, reused by every request it served.
    clients_by_pid: dict[object, set[object]] = collections.defaultdict(set)
    for _, answer in answers:
        clients_by_pid[answer["pid"]].add(answer["client"])
    assert len(clients_by_pid) >= 2, "only one worker served requests"
    assert all(len(ids) == 1 for ids in clients_by_pid.values()), clients_by_pid

    # Every acked message is in the stream exactly where its ack said, with its body;
    # the fire-and-forget ones were flushed when the workers exited; nothing twice.
    stored = read_stream(client, stream)
    for body, (_, answer) in zip(bodies, answers, strict=True):
        assert stored.get((answer["partition"], answer["offset"])) == body  # type: ignore[arg-type]
    have, want = collections.Counter(stored.values()), collections.Counter(bodies + later)
    twice = {body: sorted(at for at, b in stored.items() if b == body) for body in have - want}
    assert have == want, f"stored more than once (where): {twice}; missing: {want - have}"
    assert {partition for partition, _ in stored} == {0, 1}

    assert "Traceback" not in log and "WORKER TIMEOUT" not in log, log
    booted = set(re.findall(r"Booting worker with pid: (\d+)", log))
    exited = set(re.findall(r"Worker exiting \(pid: (\d+)\)", log))
    assert booted and booted == exited, log
    assert "Shutting down: Master" in log
