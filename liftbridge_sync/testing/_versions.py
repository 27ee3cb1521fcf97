"""Liftbridge server version strings and the features each version has.

Versions are Go module versions: a release tag such as ``v1.9.0`` or a
pseudo-version such as ``v1.9.1-0.20260106172600-50ac358b41eb``. Builds of
upstream master after v1.9.0 report ``dev`` from ``liftbridge --version``; the
module version embedded in the binary (``go version -m``) is authoritative.
"""

from __future__ import annotations

import re

__all__ = [
    "COMPAT_VERSION",
    "PINNED_COMMIT",
    "PINNED_PSEUDO_VERSION",
    "compare_versions",
    "supports_reverse",
    "supports_telemetry_key",
]

#: The upstream master commit this package is developed against.
PINNED_COMMIT = "50ac358b41eb"
#: The Go pseudo-version of :data:`PINNED_COMMIT` (committed 2026-01-06 17:26:00 UTC).
PINNED_PSEUDO_VERSION = "v1.9.1-0.20260106172600-50ac358b41eb"
#: The last tagged release, the compatibility target.
COMPAT_VERSION = "v1.9.0"

# First commit whose config accepts ``telemetry.*`` keys (945498b, 2025-12-29 18:59:35 UTC).
_TELEMETRY_SINCE = "v1.9.1-0.20251229185935-945498b4281c"

_SEMVER = re.compile(
    r"^v?(?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


def _pre_key(pre: str | None) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    # A version without a pre-release sorts after every pre-release of itself.
    if pre is None:
        return (1, ())
    parts: list[tuple[int, int, str]] = []
    for ident in pre.split("."):
        if ident.isdigit():
            parts.append((0, int(ident), ""))
        else:
            parts.append((1, 0, ident))
    return (0, tuple(parts))


def compare_versions(a: str, b: str) -> int:
    """Compare two semantic versions.

    Args:
        a: A version such as ``v1.9.0`` or a Go pseudo-version.
        b: Another version.

    Returns:
        -1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``.

    Raises:
        ValueError: If either string is not a semantic version.
    """
    ma, mb = _SEMVER.match(a), _SEMVER.match(b)
    if ma is None or mb is None:
        raise ValueError(f"not a semantic version: {a if ma is None else b!r}")
    ka = (int(ma["major"]), int(ma["minor"]), int(ma["patch"]), _pre_key(ma["pre"]))
    kb = (int(mb["major"]), int(mb["minor"]), int(mb["patch"]), _pre_key(mb["pre"]))
    return (ka > kb) - (ka < kb)


def _at_least(version: str, floor: str) -> bool:
    if version == "dev":
        # Only post-v1.9.0 master builds without build info report "dev".
        return True
    try:
        return compare_versions(version, floor) >= 0
    except ValueError:
        return False


def supports_reverse(version: str) -> bool:
    """Return whether a server version is the pinned commit or newer (reverse subscribe)."""
    return _at_least(version, PINNED_PSEUDO_VERSION)


def supports_telemetry_key(version: str) -> bool:
    """Return whether a server version accepts the ``telemetry.*`` config keys.

    Servers that accept them also enable telemetry by default, so the harness
    must then write ``telemetry.enabled: false``.
    """
    return _at_least(version, _TELEMETRY_SINCE)
