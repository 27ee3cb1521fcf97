"""Starting a Django or Flask app with the integration loads no grpc until a client is
asked for: management commands, checks and app factories start without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: Loaded by a client (its transport), not by an app's start.
TRANSPORT = ("grpc", "h2", "hpack", "tenacity", "google")

_LOADED = textwrap.dedent(
    f"""
    import sys

    def transport_loaded():
        return sorted({{m.split(".")[0] for m in sys.modules}} & set({TRANSPORT!r}))
    """
)


def _run(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _LOADED + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_django_setup_and_checks_load_no_transport_until_get_client() -> None:
    result = _run(
        """
        import django
        from django.conf import settings
        settings.configure(
            INSTALLED_APPS=["liftbridge_sync.django"], LIFTBRIDGE={"ADDRESSES": "127.0.0.1:1"}
        )
        django.setup()
        from django.core.checks import run_checks
        assert run_checks(tags=["liftbridge"]) == []
        assert not transport_loaded(), transport_loaded()

        import liftbridge_sync
        from liftbridge_sync.django import get_client
        client = get_client()
        assert isinstance(client, liftbridge_sync.Client) and get_client() is client
        assert "grpc" in transport_loaded()
        client.close()
        print("ok")
        """
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_flask_init_app_loads_no_transport_until_get_client() -> None:
    result = _run(
        """
        from flask import Flask
        from liftbridge_sync.flask import Liftbridge, get_client
        app = Flask("t")
        app.config["LIFTBRIDGE_ADDRESSES"] = "127.0.0.1:1"
        Liftbridge(app)
        assert not transport_loaded(), transport_loaded()

        import liftbridge_sync
        client = get_client(app)
        assert isinstance(client, liftbridge_sync.Client) and get_client(app) is client
        assert "grpc" in transport_loaded()
        client.close()
        print("ok")
        """
    )
    assert result.stdout.strip() == "ok", result.stderr
