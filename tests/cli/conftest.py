"""Run the ``liftbridge-sync`` command line as a real process against the real server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from liftbridge_sync import Client, NoSuchStreamError
from tests.integration.conftest import unique

Run = Callable[..., subprocess.CompletedProcess[str]]

CLI = [sys.executable, "-m", "liftbridge_sync"]


def cli_env(address: str) -> dict[str, str]:
    """The environment of a CLI process: the test server, no inherited debug switch."""
    env = dict(os.environ)
    env["LIFTBRIDGE_ADDRESSES"] = address
    env.pop("LIFTBRIDGE_DEBUG", None)
    env["PYTHONUNBUFFERED"] = "0"
    env["PYTHONFAULTHANDLER"] = "1"  # a hung process's stacks (tests.waiting.interrupt)
    return env


@pytest.fixture
def run(liftbridge_address: str) -> Run:
    """``run(*args, input=None)``: the CLI's completed process (text, 60 s limit)."""

    def call(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args],
            input=input,
            capture_output=True,
            text=True,
            errors="replace",
            env=cli_env(liftbridge_address),
            timeout=60,
        )

    return call


@pytest.fixture
def stream(liftbridge_client: Client) -> Iterator[str]:
    """A fresh 2-partition stream, deleted afterwards."""
    name = unique("cli")
    liftbridge_client.create_stream(name, name, partitions=2)
    yield name
    try:
        liftbridge_client.delete_stream(name)
    except NoSuchStreamError:
        pass
