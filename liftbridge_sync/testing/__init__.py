"""Test harness: build, run and cluster real Liftbridge servers on loopback.

Also a pytest plugin (:mod:`liftbridge_sync.testing.plugin`) and a CLI
(``python -m liftbridge_sync.testing install|serve``).
"""

from __future__ import annotations

from liftbridge_sync.testing._install import (
    COMPAT_VERSION,
    PINNED_COMMIT,
    InstalledServer,
    ServerInstallError,
    cache_dir,
    detect_version,
    install_server,
)
from liftbridge_sync.testing._process import LEADER_LOG_LINE, LiftbridgeProcess, ServerStartError
from liftbridge_sync.testing._server import LiftbridgeServer

__all__ = [
    "COMPAT_VERSION",
    "LEADER_LOG_LINE",
    "PINNED_COMMIT",
    "InstalledServer",
    "LiftbridgeProcess",
    "LiftbridgeServer",
    "ServerInstallError",
    "ServerStartError",
    "cache_dir",
    "detect_version",
    "install_server",
]
