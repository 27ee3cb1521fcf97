"""System checks (``manage.py check``) for the ``LIFTBRIDGE`` setting."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error

from liftbridge_sync import ConfigurationError
from liftbridge_sync.django.client import client_options

__all__ = ["check_settings"]


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``liftbridge_sync.E001`` if ``settings.LIFTBRIDGE`` cannot build a client.

    Offline: it checks the settings, it does not contact a broker.

    Thread-safe: reads settings only.
    """
    try:
        client_options()
    except ConfigurationError as exc:
        return [
            Error(
                str(exc),
                hint="LIFTBRIDGE = {'ADDRESSES': 'host:9292', ...}; see liftbridge_sync.settings",
                id="liftbridge_sync.E001",
            )
        ]
    return []
