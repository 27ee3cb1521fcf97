"""Liftbridge YAML configuration: known keys per version and rendering.

Unknown keys are fatal to the server (``Unknown configuration setting``), so
configs are checked against the key list of the target version before a
server is started. Keys are written in flat dotted form (``"data.dir": …``),
which the server accepts and which can express both ``nats.embedded`` and
``nats.embedded.config``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from liftbridge_sync.testing._versions import PINNED_PSEUDO_VERSION, compare_versions

__all__ = [
    "KNOWN_KEYS_V1_9_0",
    "TELEMETRY_KEYS",
    "check_keys",
    "flatten",
    "render_yaml",
    "write_config",
]

#: Every configuration key accepted by Liftbridge v1.9.0 (``server/config.go``).
KNOWN_KEYS_V1_9_0 = frozenset(
    """
    listen host port data.dir metadata.cache.max.age
    logging.level logging.recovery logging.raft logging.nats
    batch.max.messages batch.max.time
    tls.key tls.cert tls.client.auth.enabled tls.client.auth.ca
    tls.client.authz.enabled tls.client.authz.model tls.client.authz.policy
    nats.servers nats.user nats.password nats.tls.cert nats.tls.key nats.tls.ca
    nats.embedded nats.embedded.config
    streams.retention.max.bytes streams.retention.max.messages streams.retention.max.age
    streams.cleaner.interval streams.segment.max.bytes streams.segment.max.age
    streams.compact.enabled streams.compact.max.goroutines streams.auto.pause.time
    streams.auto.pause.disable.if.subscribers streams.concurrency.control streams.encryption
    clustering.server.id clustering.namespace clustering.raft.snapshot.retain
    clustering.raft.snapshot.threshold clustering.raft.cache.size
    clustering.raft.bootstrap.seed clustering.raft.bootstrap.peers
    clustering.raft.max.quorum.size clustering.replica.max.lag.time
    clustering.replica.max.leader.timeout clustering.replica.max.idle.wait
    clustering.replica.fetch.timeout clustering.min.insync.replicas
    clustering.replication.max.bytes
    activity.stream.enabled activity.stream.publish.timeout activity.stream.publish.ack.policy
    cursors.stream.partitions cursors.stream.replication.factor cursors.stream.auto.pause.time
    groups.consumer.timeout groups.coordinator.timeout
    """.split()
)
#: Keys added after v1.9.0 (telemetry, commit 945498b); the pinned commit accepts them.
TELEMETRY_KEYS = frozenset({"telemetry.enabled", "telemetry.interval.seconds"})


def flatten(config: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Flatten nested mappings into dotted keys (``{"a": {"b": 1}}`` → ``{"a.b": 1}``).

    Args:
        config: Possibly nested mapping.
        prefix: Key prefix, used in recursion.

    Returns:
        A new flat dict.
    """
    flat: dict[str, object] = {}
    for key, value in config.items():
        full = f"{prefix}{key}".lower()
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{full}."))
        else:
            flat[full] = value
    return flat


def check_keys(keys: Iterable[str], version: str, telemetry: bool) -> None:
    """Reject keys the server version would refuse at startup.

    Versions newer than the pinned commit are not checked (their key list is
    not known here).

    Args:
        keys: Iterable of dotted keys.
        version: Server version.
        telemetry: Whether the server accepts ``telemetry.*`` keys.

    Raises:
        ValueError: If a key is unknown to that version.
    """
    try:
        newer = compare_versions(version, PINNED_PSEUDO_VERSION) > 0
    except ValueError:
        newer = False
    if newer:
        return
    allowed = KNOWN_KEYS_V1_9_0 | (TELEMETRY_KEYS if telemetry else frozenset())
    unknown = sorted(str(k) for k in keys if k not in allowed)
    if unknown:
        raise ValueError(
            f"Liftbridge {version} does not accept the config key(s) {unknown} "
            "(unknown keys make the server exit at startup)"
        )


def _render_value(value: object) -> str:
    if isinstance(value, datetime.timedelta):
        return json.dumps(f"{round(value.total_seconds() * 1000)}ms")
    if isinstance(value, Path):
        return json.dumps(str(value))
    if isinstance(value, (tuple, set, frozenset)):
        value = list(value)
    if isinstance(value, list):
        return "[" + ", ".join(_render_value(v) for v in value) + "]"
    if value is None or isinstance(value, (str, bool, int, float)):
        # JSON scalars are valid YAML flow scalars.
        return json.dumps(value)
    raise TypeError(f"unsupported config value {value!r} ({type(value).__name__})")


def render_yaml(config: Mapping[str, object]) -> str:
    """Render a config as YAML with flat dotted keys.

    Args:
        config: Mapping of dotted (or nested) keys to values. Durations may be
            strings with units (``"500ms"``) or :class:`datetime.timedelta`;
            a bare integer duration means nanoseconds to the server.

    Returns:
        The YAML text.
    """
    flat = flatten(config)
    lines = [f"{json.dumps(key)}: {_render_value(value)}" for key, value in flat.items()]
    return "\n".join(lines) + "\n"


def write_config(path: Path, config: Mapping[str, object]) -> None:
    """Write :func:`render_yaml` output to ``path``."""
    path.write_text(render_yaml(config))
