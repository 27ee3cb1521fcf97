"""The per-process client built from ``settings.LIFTBRIDGE``."""

from __future__ import annotations

from django.conf import settings

from liftbridge_sync import Client, ClientOptions, ConfigurationError
from liftbridge_sync.settings import options_from_settings

__all__ = ["client_options", "get_client"]


def _label(name: str) -> str:
    return f"LIFTBRIDGE[{name!r}]"


def client_options() -> ClientOptions:
    """Client options from ``settings.LIFTBRIDGE``.

    Raises:
        ConfigurationError: if the setting is missing or invalid (the message names it).

    Thread-safe: reads settings only.
    """
    config = getattr(settings, "LIFTBRIDGE", None)
    if config is None:
        raise ConfigurationError(
            "settings.LIFTBRIDGE is not set; e.g. LIFTBRIDGE = {'ADDRESSES': 'localhost:9292'}"
        )
    if not isinstance(config, dict):
        raise ConfigurationError(f"settings.LIFTBRIDGE must be a dict, got {type(config).__name__}")
    return options_from_settings(config, label=_label)


def get_client() -> Client:
    """This process's client for ``settings.LIFTBRIDGE``.

    Created on first use, never carried across a fork (gunicorn ``--preload``), flushed
    and closed at process exit; see :meth:`liftbridge_sync.Client.for_process`.

    Raises:
        ConfigurationError: if ``settings.LIFTBRIDGE`` is missing or invalid.

    Thread-safe: every thread of a process gets the same client.
    """
    return Client.for_process(client_options())
