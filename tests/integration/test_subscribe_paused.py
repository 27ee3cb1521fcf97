"""Subscribing to a paused partition: a prompt, typed answer that says how to resume.

v1.9.0 refuses a reader of a paused partition with "segment has been closed", the same
words it uses while its cleaner swaps segments (which the client retries); only the
metadata tells the two apart.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from liftbridge_sync import Client, PartitionPausedError, StartAt, StopAt
from liftbridge_sync.models._metadata import is_paused
from tests.cli.conftest import CLI, cli_env

from .conftest import unique

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_paused_partition_is_refused_at_once_and_resume_reads_it(
    liftbridge_address: str, transport: str
) -> None:
    name = unique("paused")
    with Client([liftbridge_address], subscribe_transport=transport) as client:
        client.create_stream(name, name, partitions=2)
        client.publish(name, b"before the pause", partition=1)
        client.pause_stream(name, partitions=[1])
        started = time.monotonic()
        with pytest.raises(PartitionPausedError, match="resume=True"):
            with client.subscribe(
                name, partition=1, start=StartAt.earliest(), stop=StopAt.latest()
            ) as sub:
                list(sub)
        assert time.monotonic() - started < 10  # not the 30 s resubscribe budget
        with client.subscribe(
            name, partition=1, start=StartAt.earliest(), stop=StopAt.latest(), resume=True
        ) as sub:
            assert [m.value for m in sub] == [b"before the pause"]
        client.delete_stream(name)


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_pause_under_a_running_read_names_the_way_on(
    liftbridge_address: str, transport: str
) -> None:
    # The server ends the read with "commit log was closed" only: the error said
    # nothing of the pause's way out, nor where the read stopped.
    name = unique("paused")
    with Client([liftbridge_address], subscribe_transport=transport) as client:
        client.create_stream(name, name)
        client.publish(name, b"before the pause")
        with client.subscribe(name, start=StartAt.earliest()) as sub:
            assert sub.get(10).value == b"before the pause"
            client.pause_stream(name)
            with pytest.raises(PartitionPausedError, match="resume=True") as info:
                sub.get(10)
        assert "after offset 0" in str(info.value)
        client.delete_stream(name)


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_pause_under_a_read_that_resumes_is_resumed(
    liftbridge_address: str, transport: str
) -> None:
    """A read with resume=True, paused under it, failed and told the caller to
    subscribe with resume=True. It goes on instead, and reads what comes once the
    partition is resumed (here by a publish: v1.9.0 takes the resubscribe's
    resume=True without resuming it)."""
    name = unique("paused")
    with Client([liftbridge_address], subscribe_transport=transport) as client:
        client.create_stream(name, name)
        client.publish(name, b"before the pause")
        with client.subscribe(name, start=StartAt.earliest(), resume=True) as sub:
            assert sub.get(10).value == b"before the pause"
            client.pause_stream(name)
            with pytest.raises(TimeoutError):  # the pause ends the call within this read
                sub.get(3)
            client.publish(name, b"after the pause")
            message = sub.get(10)
            assert (message.offset, message.value) == (1, b"after the pause")
        client.delete_stream(name)


def test_the_command_line_names_the_pause_and_the_way_out(liftbridge_address: str) -> None:
    name = unique("paused")
    with Client([liftbridge_address]) as client:
        client.create_stream(name, name)
        client.publish(name, b"x")
        client.pause_stream(name)
        refused = subprocess.run(
            [*CLI, "subscribe", name, "-P", "0"],
            capture_output=True,
            text=True,
            env=cli_env(liftbridge_address),
            timeout=60,
        )
        assert refused.returncode == 1, refused.stderr
        assert "paused" in refused.stderr and "--resume" in refused.stderr
        assert "segment has been closed" not in refused.stderr
        resumed = subprocess.run(
            [*CLI, "subscribe", name, "-P", "0", "--resume"],
            capture_output=True,
            text=True,
            env=cli_env(liftbridge_address),
            timeout=60,
        )
        assert (resumed.returncode, resumed.stdout) == (0, "x\n"), resumed.stderr
        client.delete_stream(name)


def test_a_partition_resumed_by_a_publish_is_not_read_as_paused(liftbridge_address: str) -> None:
    # v1.9.0 never clears a partition's paused flag once it was paused; the client
    # reads it as paused only without a message received since the last pause or
    # resume, which a publish (that resumes it) always leaves.
    name = unique("paused")
    with Client([liftbridge_address]) as client:
        client.create_stream(name, name)
        client.publish(name, b"before")
        client.pause_stream(name)
        meta = client.fetch_partition_metadata(name, 0)
        assert meta.paused and is_paused(meta)
        client.publish(name, b"after")  # resumes the partition
        meta = client.fetch_partition_metadata(name, 0)
        assert meta.paused  # the server's flag: still set
        assert not is_paused(meta)
        with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.offset(1)) as sub:
            assert [m.value for m in sub] == [b"before", b"after"]
        client.pause_stream(name)
        assert is_paused(client.fetch_partition_metadata(name, 0))
        client.delete_stream(name)
