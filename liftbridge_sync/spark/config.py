"""Parse Spark-style string options into typed values and :class:`ClientOptions`.

Spark hands data-source options over as strings under case-insensitive keys. This
module turns them into typed values, raising :class:`~liftbridge_sync.ConfigurationError`
naming the option on bad input, and builds the picklable ``ClientOptions`` that the
executors give to :meth:`liftbridge_sync.Client.for_process`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from liftbridge_sync import ClientOptions, ConfigurationError, RetryPolicy, TLSOptions
from liftbridge_sync._durations import check_seconds

__all__ = [
    "CLIENT_OPTIONS",
    "client_options",
    "get_bool",
    "get_duration",
    "get_float",
    "get_millis",
    "get_int",
    "lower_keys",
    "stream_option",
]

#: ``liftbridge.*`` passthrough options (lower case) and the ClientOptions field each sets.
CLIENT_OPTIONS: Mapping[str, str] = {
    "liftbridge.rpctimeoutms": "rpc_timeout",
    "liftbridge.acktimeoutms": "ack_timeout",
    "liftbridge.maxinflight": "max_in_flight",
    "liftbridge.enqueuetimeoutms": "enqueue_timeout",
    "liftbridge.resubscribewaitms": "resubscribe_wait",
    "liftbridge.publishtransport": "publish_transport",
    "liftbridge.retry.maxattempts": "retry.max_attempts",
    "liftbridge.retry.maxdelayms": "retry.max_delay",
    "liftbridge.tls.cacert": "tls.ca_cert",
    "liftbridge.tls.clientcert": "tls.client_cert",
    "liftbridge.tls.clientkey": "tls.client_key",
    "liftbridge.tls.servername": "tls.server_name",
}


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """A plain dict of ``options`` with lower-cased keys (Spark's own convention)."""
    return {str(k).lower(): v for k, v in options.items()}


def stream_option(options: Mapping[str, str]) -> str | None:
    """The stream named by option ``stream`` or by the path of ``load()``/``save()``
    (Spark's ``path`` option), ``None`` when neither is given.

    Raises:
        ConfigurationError: both are given and name different streams: taking one of
            them would read or write another stream than the user meant.
    """
    stream = options.get("stream") or None
    path = options.get("path") or None
    if stream is not None and path is not None and str(stream).strip() != str(path).strip():
        raise ConfigurationError(
            f"option 'stream' ({stream!r}) and the path of load()/save() ({path!r}) name "
            "different streams; give one of them"
        )
    return stream if stream is not None else path


def get_int(options: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    """The integer option ``name`` (lower case), or ``default`` when absent.

    Raises:
        ConfigurationError: the value is not an integer >= ``minimum``.
    """
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigurationError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"option {name!r} must be >= {minimum}, got {value}")
    return value


def get_float(options: Mapping[str, str], name: str, default: float) -> float:
    """The positive number option ``name``, or ``default`` when absent.

    Raises:
        ConfigurationError: the value is not a number > 0.
    """
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ConfigurationError(f"option {name!r} must be a number, got {raw!r}") from None
    if not value > 0:
        raise ConfigurationError(f"option {name!r} must be > 0, got {raw!r}")
    return value


def get_millis(options: Mapping[str, str], name: str, default_ms: float) -> float:
    """The duration option ``name``, in milliseconds, as seconds (``default_ms`` if absent).

    Raises:
        ConfigurationError: the value is not a number > 0, is infinite or NaN, or is
            above ~24 days.
    """
    millis = get_float(options, name, default_ms)
    seconds = check_seconds(f"option {name!r}", millis / 1000.0, allow_zero=False, unlimited=False)
    assert seconds is not None  # unlimited=False
    return seconds


#: Spark's duration suffixes (``JavaUtils.timeStringAsMs``) in seconds; none means ms.
_DURATION_UNITS: Mapping[str, float] = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}


def get_duration(options: Mapping[str, str], name: str, default: float) -> float:
    """The duration option ``name`` as seconds, written as Spark writes them.

    ``"15m"``, ``"30s"``, ``"500ms"``, ``"2h"``; a bare number is milliseconds.
    ``default`` (seconds) when absent.

    Raises:
        ConfigurationError: the value is not a positive duration of at most ~24 days.
    """
    raw = options.get(name.lower())
    if raw is None:
        return default
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", str(raw).lower())
    unit = _DURATION_UNITS.get(match.group(2) or "ms") if match else None
    if match is None or unit is None:
        raise ConfigurationError(
            f"option {name!r} must be a duration like '15m', '30s' or '500ms' "
            f"(a bare number is milliseconds), got {raw!r}"
        )
    seconds = check_seconds(
        f"option {name!r}", float(match.group(1)) * unit, allow_zero=False, unlimited=False
    )
    assert seconds is not None  # unlimited=False
    return seconds


def get_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """The boolean option ``name`` (``true``/``false``), or ``default`` when absent.

    Raises:
        ConfigurationError: the value is neither ``true`` nor ``false``.
    """
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"option {name!r} must be 'true' or 'false', got {raw!r}")
    return text == "true"


def client_options(brokers: str | None, options: Mapping[str, str]) -> ClientOptions:
    """Build :class:`ClientOptions` from ``brokers`` and ``liftbridge.*`` options.

    Args:
        brokers: ``"host:port,host:port"`` seed list.
        options: Lower-cased options; only the ``liftbridge.*`` keys are read.

    Raises:
        ConfigurationError: ``brokers`` is missing, or a ``liftbridge.*`` option is
            unknown or invalid (the message names it).
    """
    if not brokers or not str(brokers).strip():
        raise ConfigurationError("option 'brokers' is required (host:port[,host:port...])")
    fields: dict[str, object] = {}
    retry: dict[str, object] = {}
    tls: dict[str, object] = {}
    for key, raw in options.items():
        if not key.startswith("liftbridge."):
            continue
        target = CLIENT_OPTIONS.get(key)
        if target is None:
            known = ", ".join(sorted(CLIENT_OPTIONS))
            raise ConfigurationError(f"unknown option {key!r}; known liftbridge.* options: {known}")
        if target.startswith("tls."):
            tls[target[4:]] = str(raw)
        elif target.endswith("_timeout") or target in ("resubscribe_wait", "retry.max_delay"):
            seconds = get_float(options, key, 1.0) / 1000.0
            (retry if target.startswith("retry.") else fields)[target.split(".")[-1]] = seconds
        elif target == "publish_transport":
            fields[target] = str(raw)
        else:
            number = get_int(options, key, 1, minimum=1)
            (retry if target.startswith("retry.") else fields)[target.split(".")[-1]] = number
    try:
        if retry:
            fields["retry"] = RetryPolicy(**retry)  # type: ignore[arg-type]
        if tls:
            fields["tls"] = TLSOptions(**tls)  # type: ignore[arg-type]
        addresses = tuple(a.strip() for a in str(brokers).split(",") if a.strip())
        return ClientOptions(addresses=addresses, **fields)  # type: ignore[arg-type]
    except ConfigurationError as exc:
        raise ConfigurationError(f"bad brokers or liftbridge.* option: {exc}") from None
