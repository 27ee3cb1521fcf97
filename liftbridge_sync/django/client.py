"""The per-process client built from ``settings.LIFTBRIDGE``."""

from __future__ import annotations

import copy
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings

import liftbridge_sync
from liftbridge_sync import ClientOptions, ConfigurationError
from liftbridge_sync.settings import options_from_settings

if TYPE_CHECKING:  # the app's start (checks, management commands) loads no grpc
    from liftbridge_sync import Client

__all__ = ["client_options", "get_client"]

_log = logging.getLogger("liftbridge_sync.client")

#: Seconds a client replaced after a settings change gets to finish its publishes.
_REPLACED_CLOSE_TIMEOUT = 5.0

#: Guards :data:`_built`.
_lock = threading.Lock()
#: Makes reading the setting and swapping :data:`_handed` one step: two threads racing
#: across a settings change would otherwise close each other's new client.
_handing = threading.Lock()
#: The last settings read (a deep copy) and the options built from them.
_built: tuple[Any, ClientOptions] | None = None
#: The client :func:`get_client` last handed out, and the pid of its process.
_handed: tuple[int, Client] | None = None


def _new_locks_in_child() -> None:
    # A parent's thread may have held them at the fork; it does not exist in the child.
    global _lock, _handing
    _lock = threading.Lock()
    _handing = threading.Lock()


os.register_at_fork(after_in_child=_new_locks_in_child)


def _label(name: str) -> str:
    return f"LIFTBRIDGE[{name!r}]"


def client_options() -> ClientOptions:
    """Client options from ``settings.LIFTBRIDGE``.

    Built once per value of the setting (TLS files are read then, not on every call):
    the same options while the setting compares equal to what was read.

    Raises:
        ConfigurationError: if the setting is missing or invalid (the message names it).

    Thread-safe: reads settings only.
    """
    global _built
    config = getattr(settings, "LIFTBRIDGE", None)
    if config is None:
        raise ConfigurationError(
            "settings.LIFTBRIDGE is not set; e.g. LIFTBRIDGE = {'ADDRESSES': 'localhost:9292'}"
        )
    if not isinstance(config, dict):
        raise ConfigurationError(f"settings.LIFTBRIDGE must be a dict, got {type(config).__name__}")
    built = _built
    if built is not None and _same(built[0], config):
        return built[1]
    options = options_from_settings(config, label=_label)
    try:
        # A copy: a setting changed in place must not change what it is compared with.
        snapshot = copy.deepcopy(config)
    except Exception:  # a value that cannot be copied: build the options every time
        return options
    with _lock:
        _built = (snapshot, options)
    return options


def _same(snapshot: Any, config: dict[str, Any]) -> bool:
    try:
        return _equal(snapshot, config)
    except Exception:  # a value whose == fails: not known to be the same
        return False


def _equal(old: Any, new: Any) -> bool:
    # Types too: 1 == True == 1.0, and a setting changed from True to 1 (which the
    # checks refuse) must be checked again, not served the options built for True.
    if type(old) is not type(new):
        return False
    if isinstance(old, dict):
        return old.keys() == new.keys() and all(_equal(old[k], new[k]) for k in old)
    if isinstance(old, list | tuple):
        return len(old) == len(new) and all(_equal(a, b) for a, b in zip(old, new, strict=True))
    return bool(old == new)


def get_client() -> Client:
    """This process's client for ``settings.LIFTBRIDGE``.

    Created on first use, never carried across a fork (gunicorn ``--preload``), flushed
    and closed at process exit; see :meth:`liftbridge_sync.Client.for_process`. When the
    setting changes, the next call closes the client it replaces (its pending publishes
    get 5 seconds) and hands out a new one.

    Raises:
        ConfigurationError: if ``settings.LIFTBRIDGE`` is missing or invalid.

    Thread-safe: every thread of a process gets the same client.
    """
    global _handed
    pid = os.getpid()
    with _handing:
        # liftbridge_sync.Client loads the client's modules on the first call only.
        client = liftbridge_sync.Client.for_process(client_options())
        handed, _handed = _handed, (pid, client)
    # A client of the parent process (before a fork) is not this process's to close.
    if handed is not None and handed[0] == pid and handed[1] is not client:
        _log.info("settings.LIFTBRIDGE changed: closing the client it replaces")
        handed[1].close(timeout=_REPLACED_CLOSE_TIMEOUT)
    return client
