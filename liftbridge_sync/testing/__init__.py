"""Test harness: build, run and cluster real Liftbridge servers on loopback.

Also a pytest plugin (:mod:`liftbridge_sync.testing.plugin`) and a CLI
(``python -m liftbridge_sync.testing install|serve``). Names are imported
lazily, so importing this package (as the pytest plugin does) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from liftbridge_sync.testing._cluster import FAST_FAILOVER, ClusterNode, LiftbridgeCluster
    from liftbridge_sync.testing._docker import DockerLiftbridgeServer, docker_unavailable_reason
    from liftbridge_sync.testing._external import ExternalLiftbridge, LiftbridgeEndpoint
    from liftbridge_sync.testing._fake import (
        AdminScript,
        FakeBroker,
        FakeCluster,
        PublishScript,
        SubscribeScript,
        fake_message,
        refuse,
        serve,
        silent,
    )
    from liftbridge_sync.testing._install import (
        InstalledServer,
        ServerInstallError,
        cache_dir,
        detect_version,
        find_installed,
        install_server,
    )
    from liftbridge_sync.testing._nats import NatsServer, find_nats_server
    from liftbridge_sync.testing._process import (
        LEADER_LOG_LINE,
        LiftbridgeProcess,
        ServerStartError,
    )
    from liftbridge_sync.testing._proxy import TcpProxy
    from liftbridge_sync.testing._server import LiftbridgeServer
    from liftbridge_sync.testing._tls import (
        AUTHZ_MODEL,
        PROBE_CLIENT,
        ServerTLS,
        TestCertificates,
        generate_certificates,
        write_policy,
    )
    from liftbridge_sync.testing._versions import (
        COMPAT_VERSION,
        PINNED_COMMIT,
        PINNED_PSEUDO_VERSION,
    )

_EXPORTS = {
    "TcpProxy": "_proxy",
    "AdminScript": "_fake",
    "FakeBroker": "_fake",
    "FakeCluster": "_fake",
    "PublishScript": "_fake",
    "SubscribeScript": "_fake",
    "fake_message": "_fake",
    "refuse": "_fake",
    "serve": "_fake",
    "silent": "_fake",
    "AUTHZ_MODEL": "_tls",
    "PROBE_CLIENT": "_tls",
    "ServerTLS": "_tls",
    "TestCertificates": "_tls",
    "generate_certificates": "_tls",
    "write_policy": "_tls",
    "COMPAT_VERSION": "_versions",
    "FAST_FAILOVER": "_cluster",
    "LEADER_LOG_LINE": "_process",
    "PINNED_COMMIT": "_versions",
    "PINNED_PSEUDO_VERSION": "_versions",
    "ClusterNode": "_cluster",
    "DockerLiftbridgeServer": "_docker",
    "ExternalLiftbridge": "_external",
    "InstalledServer": "_install",
    "LiftbridgeCluster": "_cluster",
    "LiftbridgeEndpoint": "_external",
    "LiftbridgeProcess": "_process",
    "LiftbridgeServer": "_server",
    "NatsServer": "_nats",
    "ServerInstallError": "_install",
    "ServerStartError": "_process",
    "cache_dir": "_install",
    "detect_version": "_install",
    "docker_unavailable_reason": "_docker",
    "find_installed": "_install",
    "find_nats_server": "_nats",
    "install_server": "_install",
}

__all__ = [
    "AUTHZ_MODEL",
    "AdminScript",
    "COMPAT_VERSION",
    "ClusterNode",
    "DockerLiftbridgeServer",
    "ExternalLiftbridge",
    "FAST_FAILOVER",
    "FakeBroker",
    "FakeCluster",
    "InstalledServer",
    "LEADER_LOG_LINE",
    "LiftbridgeCluster",
    "LiftbridgeEndpoint",
    "LiftbridgeProcess",
    "LiftbridgeServer",
    "NatsServer",
    "PINNED_COMMIT",
    "PINNED_PSEUDO_VERSION",
    "PROBE_CLIENT",
    "PublishScript",
    "ServerInstallError",
    "ServerStartError",
    "ServerTLS",
    "SubscribeScript",
    "TcpProxy",
    "TestCertificates",
    "cache_dir",
    "detect_version",
    "docker_unavailable_reason",
    "fake_message",
    "find_installed",
    "find_nats_server",
    "generate_certificates",
    "install_server",
    "refuse",
    "serve",
    "silent",
    "write_policy",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
