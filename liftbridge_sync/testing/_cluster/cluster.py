"""A Liftbridge cluster on loopback sharing one external ``nats-server``: starting,
healing and stopping it, and its nodes one by one."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import grpc

from liftbridge_sync.testing._cluster.nodes import ClusterNode, build_nodes
from liftbridge_sync.testing._cluster.queries import POLL_INTERVAL, ClusterMetadata
from liftbridge_sync.testing._config import flatten
from liftbridge_sync.testing._install import InstalledServer, install_server
from liftbridge_sync.testing._lifecycle import Lifecycle
from liftbridge_sync.testing._nats import NatsServer
from liftbridge_sync.testing._net import free_port
from liftbridge_sync.testing._process import ServerStartError, internal_streams
from liftbridge_sync.testing._rpc import fetch_metadata
from liftbridge_sync.testing._server import unique_name
from liftbridge_sync.testing._tls import ServerTLS

__all__ = ["LiftbridgeCluster"]

#: Named as when the cluster was one module, for the log configurations that name it.
logger = logging.getLogger("liftbridge_sync.testing._cluster")

#: Starts of a node whose gRPC port turned out to be taken.
_PORT_RETRIES = 3


class LiftbridgeCluster(ClusterMetadata, Lifecycle):
    """``size`` Liftbridge nodes on 127.0.0.1 with one external ``nats-server``.

    Every node lists all server ids in ``clustering.raft.bootstrap.peers`` (so
    the internal streams get full replication), uses the fast-failover
    settings (:data:`FAST_FAILOVER`) and the same unique namespace. Use it as a
    context manager; leaving the block stops every node and NATS and removes
    the temporary directory.

    Not thread-safe: drive it from one thread.

    Args:
        size: Number of nodes (default 3).
        installed: Server binary (default: :func:`install_server`).
        cursors_partitions: ``cursors.stream.partitions`` (default 2).
        activity: ``activity.stream.enabled`` (default True).
        config: Extra config keys for every node, merged last.
        env: Extra environment for every node.
        log_level: ``logging.level``.
        startup_timeout: Seconds to wait for the cluster to be ready.
        base_dir: Parent of the temporary directory.
        namespace: ``clustering.namespace`` (default: unique).
        tls: TLS, mutual TLS and ACL settings of every node (default: plaintext); the
            nodes talk to each other over NATS, so only clients and probes use it.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        installed: InstalledServer | None = None,
        cursors_partitions: int = 2,
        activity: bool = True,
        config: Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
        log_level: str = "info",
        startup_timeout: float = 60.0,
        base_dir: str | Path | None = None,
        namespace: str | None = None,
        tls: ServerTLS | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        if tls is not None and not isinstance(tls, ServerTLS):
            raise TypeError(f"tls must be a ServerTLS or None, got {type(tls).__name__}")
        self.tls = tls
        self.size = size
        self._installed = installed
        self._cursors_partitions = cursors_partitions
        self._activity = activity
        self._extra_config = flatten(config or {})
        self._env = dict(env or {})
        self._log_level = log_level
        self.startup_timeout = startup_timeout
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self.namespace = namespace or unique_name("lbcluster-")
        self.servers: list[ClusterNode] = []
        self._nats: NatsServer | None = None
        self._run_dir: Path | None = None

    # -- properties ----------------------------------------------------------------------

    @property
    def installed(self) -> InstalledServer:
        """The server binary (installing it on first access)."""
        if self._installed is None:
            self._installed = install_server()
        return self._installed

    @property
    def addresses(self) -> list[str]:
        """gRPC addresses of all nodes, in index order."""
        return [node.address for node in self.servers]

    @property
    def nats_url(self) -> str:
        """URL of the shared NATS server."""
        if self._nats is None:
            raise RuntimeError("the cluster has not been started")
        return self._nats.url

    @property
    def nats_pid(self) -> int | None:
        """PID of the shared ``nats-server`` while it runs."""
        return None if self._nats is None else self._nats.pid

    def restart_nats(self, *, kill: bool = False) -> None:
        """Restart the shared ``nats-server`` on the same port (SIGKILL with ``kill``).

        The nodes reconnect by themselves; this returns once NATS accepts connections,
        not once every node has reconnected.
        """
        if self._nats is None:
            raise RuntimeError("the cluster has not been started")
        self._nats.restart(kill=kill)

    @property
    def run_dir(self) -> Path:
        """The temporary directory (exists once started, until closed)."""
        if self._run_dir is None:
            raise RuntimeError("the cluster has not been started")
        return self._run_dir

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> LiftbridgeCluster:
        """Start NATS and all nodes; wait for a metadata leader and ``size`` brokers.

        A start that fails (or is interrupted) kills every process it started, NATS
        included, whether or not a ``with`` block closes the cluster afterwards; the
        temporary directory with the logs stays until :meth:`close`.

        Returns:
            self.

        Raises:
            ServerStartError: If the cluster is not ready in time (with log tails).
            ValueError: If ``config`` has a key the server version does not know.
        """
        if self._run_dir is not None:
            raise RuntimeError("the cluster was already started")
        installed = self.installed
        if self._base_dir is not None:
            self._base_dir.mkdir(parents=True, exist_ok=True)
        self._run_dir = Path(tempfile.mkdtemp(prefix="liftbridge-cluster-", dir=self._base_dir))
        try:
            self._start_processes(installed, self._run_dir)
        except BaseException:
            for node in self.servers:
                node.kill()
            if self._nats is not None:
                self._nats.kill()
            raise
        return self

    def _start_processes(self, installed: InstalledServer, run_dir: Path) -> None:
        self._nats = NatsServer(run_dir).start()
        self.servers = build_nodes(
            installed,
            run_dir,
            self._nats.url,
            size=self.size,
            namespace=self.namespace,
            tls=self.tls,
            cursors_partitions=self._cursors_partitions,
            activity=self._activity,
            log_level=self._log_level,
            extra_config=self._extra_config,
            env=self._env,
            startup_timeout=self.startup_timeout,
        )
        started = time.monotonic()
        for node in self.servers:
            node.spawn()
        deadline = started + self.startup_timeout
        for node in self.servers:
            self._wait_node_started(node, deadline)
        self.wait_ready(max(0.1, deadline - time.monotonic()))
        logger.info(
            "Liftbridge %s cluster of %d ready in %.1fs: %s (NATS %s)",
            installed.version,
            self.size,
            time.monotonic() - started,
            ", ".join(self.addresses),
            self.nats_url,
        )

    def _wait_node_started(self, node: ClusterNode, deadline: float) -> None:
        """Wait until ``node`` serves; one whose gRPC port was taken meanwhile (ports
        are picked free, but another process, a pytest-xdist worker's server or any
        outgoing connection, may bind one before the node does) is started again on
        a new port, up to ``_PORT_RETRIES`` times."""
        for attempt in range(1, _PORT_RETRIES + 1):
            try:
                node.wait_ready(max(0.1, deadline - time.monotonic()))
                return
            except ServerStartError as exc:
                if not exc.address_in_use or attempt == _PORT_RETRIES:
                    raise
                taken = node.port
                node.port = free_port(exclude={n.port for n in self.servers})
                node.config["port"] = node.port
                logger.info(
                    "cluster %s: port %d of node %s was taken; starting it on %d",
                    self.namespace,
                    taken,
                    node.server_id,
                    node.port,
                )
                node.spawn()

    def _has_metadata_leader(self) -> bool:
        return any(n.running and n.is_metadata_leader_logged() for n in self.servers)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until a metadata leader exists and every node is listed as a broker.

        Args:
            timeout: Seconds.

        Raises:
            ServerStartError: If that does not happen in time.
        """
        deadline = time.monotonic() + timeout
        while True:
            if self._has_metadata_leader():
                try:
                    response = self.metadata()
                except LookupError:
                    pass
                else:
                    streams = {meta.name for meta in response.streamMetadata}
                    expected = internal_streams(self.servers[0].config)
                    if len(response.brokers) >= self.size and expected <= streams:
                        return
            if time.monotonic() >= deadline:
                raise self._error(f"cluster not ready within {timeout:.0f}s")
            time.sleep(POLL_INTERVAL)

    def _error(self, what: str) -> ServerStartError:
        tails = "\n".join(
            f"--- {n.server_id} ({n.address}, {'running' if n.running else 'down'}) ---\n"
            f"{n.log_tail(15)}"
            for n in self.servers
        )
        return ServerStartError(f"Liftbridge {what}; node logs:\n{tails}")

    def _node(self, index: int) -> ClusterNode:
        if not 0 <= index < len(self.servers):
            raise IndexError(f"no node {index} in a cluster of {len(self.servers)}")
        return self.servers[index]

    def kill(self, index: int) -> int | None:
        """SIGKILL node ``index`` (a crash). Returns its exit code."""
        return self._node(index).kill()

    def stop_node(self, index: int, timeout: float = 10.0) -> int | None:
        """Gracefully stop node ``index``. Returns its exit code."""
        return self._node(index).stop(timeout)

    def start_node(self, index: int, timeout: float = 30.0) -> None:
        """Start a stopped node ``index`` on its data dir and wait until it rejoined.

        Args:
            index: Node index.
            timeout: Seconds to wait for it to serve and see all brokers.

        Raises:
            ServerStartError: If it does not rejoin in time.
        """
        node = self._node(index)
        node.spawn()
        deadline = time.monotonic() + timeout
        node.wait_ready(timeout)
        while True:
            try:
                brokers = fetch_metadata(node.address, tls=self.tls).brokers
                if len(brokers) >= self.size:
                    return
            except (grpc.RpcError, TimeoutError):
                pass
            if time.monotonic() >= deadline:
                raise self._error(f"node {index} did not rejoin within {timeout:.0f}s")
            time.sleep(POLL_INTERVAL)

    def heal(self, timeout: float = 30.0) -> list[str]:
        """Start every node that is not running, then wait until the cluster is ready.

        For the start of a test on a cluster shared by several: a node an earlier test
        left stopped, or that crashed (v1.9.0 panics in a follower that replicates a
        stream while it is deleted), would otherwise leave this test without a quorum.
        Each node started is logged at WARNING with its exit code and last log lines.

        Args:
            timeout: Seconds to wait for each node to rejoin, then for the cluster.

        Returns:
            The ids of the nodes started (empty if all were running).

        Raises:
            ServerStartError: If a node does not rejoin, or the cluster is not ready, in time.
        """
        started: list[str] = []
        for node in self.servers:
            if node.running:
                continue
            logger.warning(
                "cluster %s: node %s (%s) was not running (exit code %s); starting it "
                "again. Its log ended with:\n%s",
                self.namespace,
                node.server_id,
                node.address,
                node.returncode,
                node.log_tail(15),
            )
            self.start_node(node.index, timeout)
            started.append(node.server_id)
        if started:
            self.wait_ready(timeout)
        return started

    def restart(self, index: int, timeout: float = 30.0, *, kill: bool = False) -> None:
        """Stop (or kill) node ``index`` if running, start it again and wait until it rejoined.

        Args:
            index: Node index.
            timeout: Seconds to wait for it to rejoin.
            kill: SIGKILL instead of a graceful stop.
        """
        node = self._node(index)
        if kill:
            node.kill()
        else:
            node.stop()
        self.start_node(index, timeout)

    # -- teardown ------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node (SIGINT to all, then SIGKILL stragglers) and NATS."""
        for node in self.servers:
            node.interrupt()
        deadline = time.monotonic() + timeout
        for node in self.servers:
            node.stop(max(0.1, deadline - time.monotonic()))
        if self._nats is not None:
            self._nats.stop()

    def close(self) -> None:
        """Stop everything and remove the temporary directory."""
        try:
            self.stop()
        finally:
            self.remove_run_dir(self._run_dir)
            self._run_dir = None

    def __repr__(self) -> str:
        return f"<LiftbridgeCluster {self.namespace} {self.addresses}>"
