"""Parse Spark-style string options into typed values and :class:`ClientOptions`.

Spark hands data-source options over as strings under case-insensitive keys. This
module turns them into typed values, raising :class:`~liftbridge_sync.ConfigurationError`
naming the option on bad input, and builds the picklable ``ClientOptions`` that the
executors give to :meth:`liftbridge_sync.Client.for_process`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from liftbridge_sync import ClientOptions, ConfigurationError, RetryPolicy, TLSOptions
from liftbridge_sync._durations import TIMEOUT_MAX_SECONDS, check_seconds
from liftbridge_sync._wire.validate import INT64_MAX, check_name

__all__ = [
    "CLIENT_OPTIONS",
    "client_options",
    "get_bool",
    "parse_partition_key",
    "get_duration",
    "get_millis",
    "get_int",
    "load_json",
    "lower_keys",
    "parse_integer",
    "stream_option",
]

#: The ``liftbridge.*`` passthrough options as documented, and the ClientOptions field
#: each sets.
_CLIENT_FIELDS: Mapping[str, str] = {
    "liftbridge.rpcTimeoutMs": "rpc_timeout",
    "liftbridge.ackTimeoutMs": "ack_timeout",
    "liftbridge.maxInFlight": "max_in_flight",
    "liftbridge.enqueueTimeoutMs": "enqueue_timeout",
    "liftbridge.resubscribeWaitMs": "resubscribe_wait",
    "liftbridge.publishTransport": "publish_transport",
    "liftbridge.retry.maxAttempts": "retry.max_attempts",
    "liftbridge.retry.maxDelayMs": "retry.max_delay",
    "liftbridge.tls.caCert": "tls.ca_cert",
    "liftbridge.tls.clientCert": "tls.client_cert",
    "liftbridge.tls.clientKey": "tls.client_key",
    "liftbridge.tls.serverName": "tls.server_name",
}

#: The same by lower-case key (Spark's option keys are case-insensitive).
CLIENT_OPTIONS: Mapping[str, str] = {name.lower(): field for name, field in _CLIENT_FIELDS.items()}

#: The documented spelling of each lower-case ``liftbridge.*`` key, for messages.
_CLIENT_SPELLING: Mapping[str, str] = {name.lower(): name for name in _CLIENT_FIELDS}

#: An integer as Spark's own options take one (Java's ``Long.parseLong``): ASCII digits
#: with an optional sign; no ``_`` separators, no other scripts' digits.
_INTEGER = re.compile(r"[+-]?[0-9]+")

#: A decimal number of milliseconds: no ``nan``/``inf``, no ``_`` separators.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


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
    raw = options.get("stream")
    stream = None if raw is None else str(raw).strip()
    if stream == "":
        # Not taken as absent: a write would then go to each row's 'stream' column.
        raise ConfigurationError(
            f"option 'stream' is empty ({raw!r}): name a stream, or leave the option out "
            "(a write then takes each row's 'stream' column)"
        )
    path = str(options.get("path") or "").strip() or None
    if stream is not None and path is not None and stream != path:
        raise ConfigurationError(
            f"option 'stream' ({raw!r}) and the path of load()/save() "
            f"({options.get('path')!r}) name different streams; give one of them"
        )
    named = stream if stream is not None else path
    if named is not None:
        try:
            check_name("stream", named, allow_reserved=True)
        except ConfigurationError as exc:
            source = "option 'stream'" if stream is not None else "the path of load()/save()"
            raise ConfigurationError(f"{source} ({named!r}): {exc}") from None
    return named


def load_json(option: str, text: str, shape: str) -> Any:
    """``text`` parsed as JSON, for option ``option`` (``shape`` says what it must be,
    for the message: "JSON like ...").

    Raises:
        ConfigurationError: ``text`` is no JSON, or JSON that Python's decoder refuses
            past its syntax: an integer of more than 4,300 digits, or nesting deeper
            than the recursion limit.
    """
    try:
        return json.loads(text, object_pairs_hook=_without_repeats)
    except _RepeatedKey as exc:
        raise ConfigurationError(
            f"option {option!r} names {exc.key!r} twice in one JSON object (JSON "
            "decoders keep one of them, and which is theirs to choose)"
        ) from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigurationError(f"option {option!r} must be {shape}: {reason}") from None


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice (``json`` keeps the last)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _RepeatedKey(key)
        result[key] = value
    return result


#: A partition id as a JSON key: the decimal digits of a non-negative int32, as Spark
#: and Kafka write them (no sign, space or leading zero).
_PARTITION_KEY = re.compile(r"0|[1-9][0-9]{0,9}")


def parse_partition_key(key: str) -> int | None:
    """``key`` as a partition id, or ``None`` if it is not one written plainly."""
    if _PARTITION_KEY.fullmatch(key) is None or int(key) > 2**31 - 1:
        return None
    return int(key)


def parse_integer(text: str) -> int | None:
    """``text`` (stripped) as an integer written as Spark's options write one (ASCII
    digits, maybe signed), or ``None``; one of over 40 digits reads as ``None`` too."""
    text = text.strip()
    if _INTEGER.fullmatch(text) is None or len(text.lstrip("+-").lstrip("0")) > 40:
        return None
    return int(text)


def get_int(
    options: Mapping[str, str],
    name: str,
    default: int,
    minimum: int = 0,
    maximum: int = INT64_MAX,
) -> int:
    """The integer option ``name`` (looked up in lower case), or ``default`` when absent.

    Raises:
        ConfigurationError: the value is not an integer (ASCII digits, maybe signed)
            from ``minimum`` to ``maximum`` (a signed 64-bit integer by default, as
            Spark's Kafka connector takes its counts).
    """
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip()
    value = parse_integer(text)
    if value is None:
        if _INTEGER.fullmatch(text) is None:
            raise ConfigurationError(f"option {name!r} must be an integer, got {raw!r}")
        value = minimum - 1 if text[0] == "-" else maximum + 1  # over 40 digits
    if value < minimum:
        raise ConfigurationError(f"option {name!r} must be >= {minimum}, got {raw!r}")
    if value > maximum:
        raise ConfigurationError(f"option {name!r} must be at most {maximum}, got {raw!r}")
    return value


def get_millis(options: Mapping[str, str], name: str, default_ms: float) -> float:
    """The duration option ``name`` (looked up in lower case), in milliseconds, as
    seconds (``default_ms`` when absent).

    Raises:
        ConfigurationError: the value is not a decimal number of milliseconds from 1
            (the Kafka connector's resolution: a shorter wait could never see an
            answer) to ``TIMEOUT_MAX_SECONDS`` (~23 days); NaN and infinity included.
    """
    raw = options.get(name.lower())
    if raw is None:
        return default_ms / 1000.0
    text = str(raw).strip()
    if _DECIMAL.fullmatch(text) is None:
        raise ConfigurationError(f"option {name!r} must be a number of milliseconds, got {raw!r}")
    millis = float(text)
    if not 1.0 <= millis <= TIMEOUT_MAX_SECONDS * 1000.0:
        raise ConfigurationError(
            f"option {name!r} must be from 1 to {TIMEOUT_MAX_SECONDS * 1000.0:.0f} "
            f"milliseconds, got {raw!r}"
        )
    return millis / 1000.0


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
            known = ", ".join(_CLIENT_FIELDS)
            raise ConfigurationError(f"unknown option {key!r}; known liftbridge.* options: {known}")
        name = _CLIENT_SPELLING[key]  # looked up in lower case: key itself
        if target.startswith("tls."):
            tls[target[4:]] = str(raw)
        elif target.endswith("_timeout") or target in ("resubscribe_wait", "retry.max_delay"):
            seconds = get_millis(options, name, 1.0)
            (retry if target.startswith("retry.") else fields)[target.split(".")[-1]] = seconds
        elif target == "publish_transport":
            fields[target] = str(raw)
        else:
            number = get_int(options, name, 1, minimum=1)
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
