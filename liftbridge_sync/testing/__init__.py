"""Test harness: build, run and cluster real Liftbridge servers on loopback.

Also a pytest plugin (:mod:`liftbridge_sync.testing.plugin`) and a CLI
(``python -m liftbridge_sync.testing install|serve``).
"""

from __future__ import annotations

from liftbridge_sync.testing._cluster import FAST_FAILOVER, ClusterNode, LiftbridgeCluster
from liftbridge_sync.testing._docker import DockerLiftbridgeServer, docker_unavailable_reason
from liftbridge_sync.testing._external import ExternalLiftbridge, LiftbridgeEndpoint
from liftbridge_sync.testing._install import (
    COMPAT_VERSION,
    PINNED_COMMIT,
    InstalledServer,
    ServerInstallError,
    cache_dir,
    detect_version,
    find_installed,
    install_server,
)
from liftbridge_sync.testing._nats import NatsServer, find_nats_server
from liftbridge_sync.testing._process import LEADER_LOG_LINE, LiftbridgeProcess, ServerStartError
from liftbridge_sync.testing._server import LiftbridgeServer
from liftbridge_sync.testing._versions import PINNED_PSEUDO_VERSION

__all__ = [
    "COMPAT_VERSION",
    "FAST_FAILOVER",
    "LEADER_LOG_LINE",
    "PINNED_COMMIT",
    "PINNED_PSEUDO_VERSION",
    "ClusterNode",
    "DockerLiftbridgeServer",
    "ExternalLiftbridge",
    "InstalledServer",
    "LiftbridgeCluster",
    "LiftbridgeEndpoint",
    "LiftbridgeProcess",
    "LiftbridgeServer",
    "NatsServer",
    "ServerInstallError",
    "ServerStartError",
    "cache_dir",
    "detect_version",
    "docker_unavailable_reason",
    "find_installed",
    "find_nats_server",
    "install_server",
]
