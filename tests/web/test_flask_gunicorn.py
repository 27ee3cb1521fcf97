"""examples/flask_app.py under a real gunicorn: sync (with and without --preload), gthread."""

from __future__ import annotations

import pytest

from liftbridge_sync import Client
from tests.web.drive import drive_and_check
from tests.web.gunicorn import ROOT

pytestmark = pytest.mark.integration

CONFIGS = {
    "sync": ["-k", "sync", "-w", "3"],
    "sync-preload": ["-k", "sync", "-w", "3", "--preload"],
    "gthread": ["-k", "gthread", "-w", "2", "--threads", "8"],
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_flask_example_under_gunicorn(
    config: str, web_stream: str, liftbridge_address: str, liftbridge_client: Client
) -> None:
    drive_and_check(
        "flask_app:app",
        CONFIGS[config],
        chdir=ROOT / "examples",
        env={"LIFTBRIDGE_ADDRESSES": liftbridge_address, "EXAMPLE_STREAM": web_stream},
        client=liftbridge_client,
        stream=web_stream,
        requests=1000,
        async_requests=200,
    )
