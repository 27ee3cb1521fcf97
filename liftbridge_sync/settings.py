"""Client options from framework settings (Flask ``app.config``, Django ``settings``).

Both frameworks name options in upper case: Flask as ``LIFTBRIDGE_<NAME>`` keys of
``app.config``, Django as ``<NAME>`` keys of the ``LIFTBRIDGE`` dict. Names:

* ``ADDRESSES``: ``"host:port"``, a comma-separated str or a list (required).
* ``TLS``: ``None`` or a dict of :class:`~liftbridge_sync.TLSOptions` fields
  (``ca_cert``, ``client_cert``, ``client_key``, ``server_name``; PEM bytes or paths).
* ``RETRY``: a dict of :class:`~liftbridge_sync.RetryPolicy` fields.

The keys of ``TLS`` and ``RETRY`` may be in either case (``"max_attempts"`` or
``"MAX_ATTEMPTS"``).
* Every other :class:`~liftbridge_sync.ClientOptions` field, by its upper-case name:
  ``RPC_TIMEOUT``, ``ACK_TIMEOUT``, ``MAX_IN_FLIGHT``, ``ENQUEUE_TIMEOUT``,
  ``RESUBSCRIBE_WAIT``, ``PUBLISH_TRANSPORT``, ``GRPC_OPTIONS``, ``TELEMETRY``,
  ``TRACE_PROPAGATION``, ``KEEPALIVE_INTERVAL``, ``METADATA_MAX_AGE``, ...
  (:data:`SETTING_NAMES` lists them all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError
from liftbridge_sync.options import ClientOptions, RetryPolicy, TLSOptions

__all__ = ["SETTING_NAMES", "options_from_settings"]

#: The other :class:`ClientOptions` fields, each a setting of its upper-case name.
_SCALARS = tuple(
    f.name.upper()
    for f in dataclasses.fields(ClientOptions)
    if f.name not in ("addresses", "tls", "retry")
)

#: Every setting name understood by :func:`options_from_settings`.
SETTING_NAMES = ("ADDRESSES", "TLS", "RETRY", *_SCALARS)


def _group(value: object, cls: Callable[..., Any], label: str) -> Any:
    if value is None or isinstance(value, TLSOptions | RetryPolicy):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{label} must be a dict, got {type(value).__name__}")
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    strange = [k for k in value if not isinstance(k, str)]
    if strange:
        raise ConfigurationError(f"{label} keys must be str, got {strange[0]!r}")
    kwargs = {k.lower(): v for k, v in value.items()}
    if len(kwargs) < len(value):
        raise ConfigurationError(f"{label} has the same key in two cases: {sorted(value)}")
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise ConfigurationError(
            f"{label} has unknown keys {unknown}; expected some of {sorted(fields)}"
        )
    try:
        return cls(**kwargs)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{label}: {exc}") from None


def options_from_settings(
    settings: Mapping[str, object], *, label: Callable[[str], str] = str
) -> ClientOptions:
    """Build :class:`ClientOptions` from upper-case settings (see the module docstring).

    Args:
        settings: Setting name (without any framework prefix) to value.
        label: How to name a setting in error messages, e.g.
            ``lambda n: f"LIFTBRIDGE_{n}"`` for Flask.

    Raises:
        ArgumentTypeError: ``settings`` is not a mapping.
        ConfigurationError: naming the setting that is missing, unknown or invalid.

    Thread-safe: a pure function.
    """
    if not isinstance(settings, Mapping):  # a str was read as its letters' names
        raise ArgumentTypeError(
            f"Liftbridge settings must be a mapping of name to value, got {type(settings).__name__}"
        )
    strange = [n for n in settings if not isinstance(n, str)]
    if strange:
        raise ConfigurationError(f"Liftbridge setting names must be str, got {strange[0]!r}")
    unknown = sorted(set(settings) - set(SETTING_NAMES))
    if unknown:
        raise ConfigurationError(
            f"unknown Liftbridge settings {[label(n) for n in unknown]}; "
            f"known: {', '.join(label(n) for n in SETTING_NAMES)}"
        )
    addresses = settings.get("ADDRESSES")
    if not addresses:
        raise ConfigurationError(f"{label('ADDRESSES')} is required (e.g. 'localhost:9292')")
    kwargs: dict[str, Any] = {}
    for name in _SCALARS:
        if name in settings:
            kwargs[name.lower()] = settings[name]
    if "TLS" in settings:
        kwargs["tls"] = _group(settings["TLS"], TLSOptions, label("TLS"))
    if "RETRY" in settings and settings["RETRY"] is not None:
        kwargs["retry"] = _group(settings["RETRY"], RetryPolicy, label("RETRY"))
    if isinstance(addresses, list | tuple):
        addresses = tuple(addresses)
    elif not isinstance(addresses, str):
        raise ConfigurationError(f"{label('ADDRESSES')} must be a str or a list of 'host:port'")
    try:
        return ClientOptions(addresses=addresses, **kwargs)  # type: ignore[arg-type]
    except (ConfigurationError, TypeError) as exc:
        message = str(exc)
        for name in SETTING_NAMES:
            message = message.replace(f"'{name.lower()}'", label(name))
        if "address" in message and label("ADDRESSES") not in message:
            message = f"{label('ADDRESSES')}: {message}"
        raise ConfigurationError(message) from None
