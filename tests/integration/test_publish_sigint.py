"""A single broker stopped with SIGINT under a publishing client, then started again.

v1.9.0's graceful stop cuts connections without a GOAWAY, and the broker then comes
back on the same port answering "no such stream" until it has rebuilt its streams. The
publishers ride through: what was written and not answered is sent again once the
broker is back, what was published meanwhile waits for it (within the retry policy),
"no such stream" from the restarting broker is retried, and nothing fails or is lost.
"""

from __future__ import annotations

import time

import pytest

from liftbridge_sync import Client, LiftbridgeError, Message
from liftbridge_sync.testing import LiftbridgeServer
from tests.constants import PATIENT_RETRY

from ._publishers import Publishers, read_back
from ._rewrites import Where, judge_missing
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.serial]


def test_a_broker_stopped_with_sigint_and_restarted_fails_and_loses_nothing() -> None:
    name = unique()
    with LiftbridgeServer() as server, Client([server.address], retry=PATIENT_RETRY) as client:
        client.create_stream(name, name)
        # The client knows the stream from the cluster's metadata (as any client using a
        # partitioner does): the restarted broker's "no such stream" is then retried.
        client.fetch_metadata(name)
        with Publishers(client, name, 1) as run:
            deadline = time.monotonic() + 30
            while len(run.futures) < 2_000 and time.monotonic() < deadline:
                run.stop.wait(0.05)
            down_at = time.monotonic()
            server.restart()  # SIGINT, then started again on the same port and data
            back_at = time.monotonic()
            run.stop.wait(2.0)
        failed = [e for e in (f.exception(timeout=60) for f in run.futures) if e is not None]
        stats = client.publisher_stats()
        log: dict[Where, Message] = {}
        try:
            stored = read_back(client, name, 1, log=log)
        except LiftbridgeError as exc:
            # Seen once in CI: the restarted server went away during the read, without a
            # word in the test's output. Its own last words, if it died:
            if server.exited:
                raise AssertionError(
                    f"the restarted server exited (code {server.returncode}) during the "
                    f"read: {server.crash_reason()}\n{server.log_tail(60)}"
                ) from exc
            raise
    acked = {b"a%d" % i for i in range(len(run.futures))} | {v for v, _ in run.sync_acks}
    missing = acked - set(stored)
    print(
        f"\nSIGINT single node: {len(run.futures)} publish_async + {len(run.sync_acks)} "
        f"publish(); down for {back_at - down_at:.1f}s; longest stall "
        f"{run.longest_stall():.2f}s; {len(stored) - len(set(stored))} duplicates; {stats}"
    )
    assert not failed, f"{len(failed)} publish_async failed, e.g. {failed[:3]}"
    assert not run.sync_errors, f"{len(run.sync_errors)} publish() raised: {run.sync_errors[:3]}"
    judge_missing(run.acks_of(missing), log)
    assert stats.connects >= 2
