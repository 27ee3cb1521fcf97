"""examples/django_project: system checks, liftbridge_tail, and a real gunicorn."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from liftbridge_sync import Client
from tests.web.drive import drive_and_check
from tests.web.gunicorn import ROOT

pytestmark = pytest.mark.integration

PROJECT = ROOT / "examples" / "django_project"

CONFIGS = {
    "sync-preload": ["-k", "sync", "-w", "3", "--preload"],
    "gthread": ["-k", "gthread", "-w", "2", "--threads", "8"],
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        errors="replace",
        env={**os.environ, **env},
        timeout=60,
    )


def test_system_checks() -> None:
    good = manage("check", "--tag", "liftbridge", LIFTBRIDGE_ADDRESSES="lb:9292")
    assert good.returncode == 0 and "no issues" in good.stdout, good.stderr
    bad = manage("check", LIFTBRIDGE_ADDRESSES="lb-without-port")
    assert bad.returncode != 0
    assert "liftbridge_sync.E001" in bad.stderr and "LIFTBRIDGE['ADDRESSES']" in bad.stderr
    timeout = manage("check", LIFTBRIDGE_ADDRESSES="lb:9292", LIFTBRIDGE_ACK_TIMEOUT="0")
    assert timeout.returncode != 0
    assert "LIFTBRIDGE['ACK_TIMEOUT']" in timeout.stderr


def test_liftbridge_tail(
    liftbridge_address: str, liftbridge_client: Client, web_stream: str
) -> None:
    liftbridge_client.create_stream(web_stream, web_stream, partitions=2)
    for i in range(5):
        liftbridge_client.publish(web_stream, f"m{i}".encode(), partition=i % 2)
    env = {"LIFTBRIDGE_ADDRESSES": liftbridge_address}
    everything = manage("liftbridge_tail", web_stream, "-o", "json", **env)
    assert everything.returncode == 0, everything.stderr
    records = [json.loads(line) for line in everything.stdout.splitlines()]
    assert sorted((r["partition"], r["offset"], r["value"]) for r in records) == [
        (0, 0, "m0"), (0, 1, "m2"), (0, 2, "m4"), (1, 0, "m1"), (1, 1, "m3"),
    ]  # fmt: skip
    window = manage(
        "liftbridge_tail", web_stream, "-P", "0", "--start", "offset:1", "--stop", "offset:1", **env
    )
    assert window.stdout.splitlines() == ["m2"]
    missing = manage("liftbridge_tail", web_stream + "-absent", **env)
    assert missing.returncode == 1 and "CommandError" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = manage("liftbridge_tail", web_stream, "--start", "soon", **env)
    assert bad.returncode == 1 and "unknown start position" in bad.stderr


@pytest.mark.parametrize("config", list(CONFIGS))
def test_django_example_under_gunicorn(
    config: str, web_stream: str, liftbridge_address: str, liftbridge_client: Client
) -> None:
    drive_and_check(
        "liftbridge_demo.wsgi:application",
        CONFIGS[config],
        chdir=PROJECT,
        env={"LIFTBRIDGE_ADDRESSES": liftbridge_address, "EXAMPLE_STREAM": web_stream},
        client=liftbridge_client,
        stream=web_stream,
        requests=1000,
        async_requests=200,
    )
