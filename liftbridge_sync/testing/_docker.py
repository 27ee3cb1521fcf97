"""A Liftbridge server in a Docker container (testcontainers backend).

The container runs the upstream standalone image (Liftbridge with embedded
NATS). Settings are passed as ``LIFTBRIDGE_<KEY>`` environment variables,
which the server reads on top of the image's config file, so nothing has to
be mounted: the gRPC port is published on 127.0.0.1 under the same number
the server advertises, so metadata-based reconnects work.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import socket
import time
import urllib.parse
import warnings
from typing import Any

from liftbridge_sync.testing._lifecycle import Lifecycle
from liftbridge_sync.testing._net import LOOPBACK, free_port
from liftbridge_sync.testing._process import LEADER_LOG_LINE, ServerStartError

__all__ = ["DEFAULT_IMAGE", "DockerLiftbridgeServer", "docker_unavailable_reason"]

logger = logging.getLogger(__name__)

DEFAULT_IMAGE = "liftbridge/standalone-dev:latest"
_NATS_CONTAINER_PORT = 4222


def _socket_problem(timeout: float) -> str | None:
    """Check ``DOCKER_HOST`` with a plain socket (docker-py leaks sockets on failure)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    parsed = urllib.parse.urlparse(host)
    try:
        if parsed.scheme in ("unix", "http+unix"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(parsed.path)
        elif parsed.scheme in ("tcp", "http", "https") and parsed.hostname:
            port = parsed.port or (2376 if parsed.scheme == "https" else 2375)
            with socket.create_connection((parsed.hostname, port), timeout=timeout):
                pass
    except OSError as exc:
        return f"{host}: {exc}"
    return None


def docker_unavailable_reason(timeout: float = 5.0) -> str | None:
    """Return why Docker cannot be used, or None when an engine answers a ping."""
    problem = _socket_problem(timeout)
    if problem is not None:
        return f"Docker engine not reachable: {problem}"
    try:
        docker = importlib.import_module("docker")
    except ImportError as exc:
        return f"the docker Python package is not installed: {exc}"
    try:
        client = docker.from_env(timeout=int(max(1, timeout)))
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # docker raises many unrelated types here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()  # reap the socket docker-py leaks on a failed connect
        return f"Docker engine not reachable: {exc}"
    return None


class DockerLiftbridgeServer(Lifecycle):
    """A single Liftbridge server in a container, ports published on 127.0.0.1.

    Not thread-safe.

    Args:
        image: Image to run (default ``LIFTBRIDGE_DOCKER_IMAGE`` or
            :data:`DEFAULT_IMAGE`).
        cursors_partitions: ``cursors.stream.partitions``.
        activity: ``activity.stream.enabled``.
        env: Extra environment for the container.
        startup_timeout: Seconds to wait for readiness (image pulls included).
    """

    def __init__(
        self,
        *,
        image: str | None = None,
        cursors_partitions: int = 2,
        activity: bool = True,
        env: dict[str, str] | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        self.image = image or os.environ.get("LIFTBRIDGE_DOCKER_IMAGE", DEFAULT_IMAGE)
        self.port = free_port()
        self.nats_port = free_port(exclude={self.port})
        self.host = LOOPBACK
        self.startup_timeout = startup_timeout
        self._env: dict[str, str] = {
            # Bind every interface inside the container, advertise 127.0.0.1:<port>.
            "LIFTBRIDGE_LISTEN": f"0.0.0.0:{self.port}",
            "LIFTBRIDGE_HOST": LOOPBACK,
            "LIFTBRIDGE_PORT": str(self.port),
            "LIFTBRIDGE_CURSORS.STREAM.PARTITIONS": str(cursors_partitions),
            "LIFTBRIDGE_CURSORS.STREAM.AUTO.PAUSE.TIME": "0s",
            "LIFTBRIDGE_ACTIVITY.STREAM.ENABLED": "true" if activity else "false",
            # Read only by servers that know the key; harmless for older ones.
            "LIFTBRIDGE_TELEMETRY.ENABLED": "false",
        }
        self._env.update(env or {})
        self._container: Any = None

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def nats_url(self) -> str:
        """URL of the container's NATS, published on 127.0.0.1."""
        return f"nats://{LOOPBACK}:{self.nats_port}"

    def start(self) -> DockerLiftbridgeServer:
        """Run the container and wait for the leader log line and a FetchMetadata.

        Returns:
            self.

        Raises:
            ServerStartError: If it is not ready in time.
        """
        container_mod = importlib.import_module("testcontainers.core.container")
        container = container_mod.DockerContainer(self.image)
        for key, value in self._env.items():
            container.with_env(key, value)
        container.ports[f"{self.port}/tcp"] = (LOOPBACK, self.port)
        container.ports[f"{_NATS_CONTAINER_PORT}/tcp"] = (LOOPBACK, self.nats_port)
        self._container = container.start()
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if LEADER_LOG_LINE in self.log_tail(200) and self._probe():
                logger.info("Liftbridge container %s ready at %s", self.image, self.address)
                return self
            if time.monotonic() >= deadline:
                tail = self.log_tail()
                self.stop()
                raise ServerStartError(
                    f"Liftbridge container {self.image} not ready in "
                    f"{self.startup_timeout:.0f}s:\n{tail}"
                )
            time.sleep(0.2)

    def _probe(self) -> bool:
        import grpc

        from liftbridge_sync.testing._rpc import fetch_metadata

        try:
            return len(fetch_metadata(self.address, timeout=5.0).brokers) > 0
        except (grpc.RpcError, TimeoutError):
            return False

    def log_tail(self, n: int = 40) -> str:
        """Return the last ``n`` lines of the container's output."""
        if self._container is None:
            return ""
        stdout, stderr = self._container.get_logs()
        text = (bytes(stdout) + bytes(stderr)).decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-n:])

    def stop(self, timeout: float = 10.0) -> None:
        """Remove the container."""
        if self._container is not None:
            self._container.stop()
            self._container = None

    def close(self) -> None:
        """Stop the container (the same as :meth:`stop`)."""
        self.stop()
