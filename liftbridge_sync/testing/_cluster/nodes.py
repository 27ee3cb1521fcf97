"""The nodes of a :class:`~liftbridge_sync.testing.LiftbridgeCluster`, and what each is
configured with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from liftbridge_sync.testing._config import check_keys
from liftbridge_sync.testing._install import InstalledServer
from liftbridge_sync.testing._net import free_port
from liftbridge_sync.testing._process import LiftbridgeProcess
from liftbridge_sync.testing._server import base_config, unique_name
from liftbridge_sync.testing._tls import ServerTLS

__all__ = ["FAST_FAILOVER", "ClusterNode", "build_nodes"]

#: Settings that make failover happen within seconds instead of minutes.
FAST_FAILOVER: Mapping[str, object] = {
    "metadata.cache.max.age": "1s",
    "clustering.replica.max.leader.timeout": "1s",
    "clustering.replica.max.idle.wait": "500ms",
    "clustering.replica.fetch.timeout": "500ms",
    # A dead replica leaves the ISR after this long; until then nothing new commits
    # and committed-only reads stall (the default is 15 s). Must exceed max.idle.wait.
    "clustering.replica.max.lag.time": "2s",
    "groups.consumer.timeout": "3s",
    "groups.coordinator.timeout": "3s",
}


class ClusterNode(LiftbridgeProcess):
    """One node of a :class:`LiftbridgeCluster`.

    Shares :class:`~liftbridge_sync.testing.LiftbridgeServer`'s API where it
    makes sense (``address``, ``port``, ``pid``, ``stop``, ``kill``, ``log_tail``…).
    Not thread-safe.

    Attributes:
        index: Position in :attr:`LiftbridgeCluster.servers`.
    """

    index: int = 0

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ClusterNode {self.index} {self.server_id} {self.address} {state}>"


def build_nodes(
    installed: InstalledServer,
    run_dir: Path,
    nats_url: str,
    *,
    size: int,
    namespace: str,
    tls: ServerTLS | None,
    cursors_partitions: int,
    activity: bool,
    log_level: str,
    extra_config: Mapping[str, object],
    env: Mapping[str, str],
    startup_timeout: float,
) -> list[ClusterNode]:
    """``size`` nodes of one cluster, not started: each on a free port, under
    ``run_dir``, listing every node's id as a bootstrap peer, with :data:`FAST_FAILOVER`
    and then ``extra_config`` over the base config.

    The arguments are the :class:`~liftbridge_sync.testing.LiftbridgeCluster`'s.

    Raises:
        ValueError: If the config has a key the server version does not know.
    """
    ids = [unique_name(f"n{i}-") for i in range(size)]
    used: set[int] = set()
    nodes = []
    for index, server_id in enumerate(ids):
        port = free_port(exclude=used)
        used.add(port)
        data_dir = run_dir / server_id / "data"
        config = base_config(
            installed,
            server_id=server_id,
            namespace=namespace,
            port=port,
            data_dir=data_dir,
            nats_servers=[nats_url],
            cursors_partitions=cursors_partitions,
            activity=activity,
            log_level=log_level,
        )
        config["clustering.raft.bootstrap.peers"] = list(ids)
        config.update(FAST_FAILOVER)
        if tls is not None:
            config.update(tls.server_config(run_dir))
        config.update(extra_config)
        check_keys(config.keys(), installed.version, installed.supports_telemetry_key)
        node = ClusterNode(
            installed=installed,
            run_dir=run_dir,
            config=config,
            server_id=server_id,
            namespace=namespace,
            port=port,
            nats_url=nats_url,
            data_dir=data_dir,
            env=env,
            require_leader=False,
            startup_timeout=startup_timeout,
            tls=tls,
        )
        node.index = index
        nodes.append(node)
    return nodes
