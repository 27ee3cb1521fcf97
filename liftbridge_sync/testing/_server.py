"""A single loopback Liftbridge server with embedded NATS, for tests and development."""

from __future__ import annotations

import logging
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from liftbridge_sync.testing._config import check_keys, flatten
from liftbridge_sync.testing._install import InstalledServer, install_server
from liftbridge_sync.testing._lifecycle import Lifecycle
from liftbridge_sync.testing._net import LOOPBACK, free_port
from liftbridge_sync.testing._process import LiftbridgeProcess, ServerStartError
from liftbridge_sync.testing._tls import ServerTLS

if TYPE_CHECKING:
    from liftbridge_sync.options import TLSOptions

__all__ = ["LiftbridgeServer", "unique_name"]

logger = logging.getLogger(__name__)

_PORT_RETRIES = 3


def unique_name(prefix: str) -> str:
    """Return ``prefix`` plus a random suffix, valid as a Liftbridge namespace or server id."""
    return f"{prefix}{secrets.token_hex(5)}"


def base_config(
    installed: InstalledServer,
    *,
    server_id: str,
    namespace: str,
    port: int,
    data_dir: Path,
    nats_servers: list[str],
    cursors_partitions: int,
    activity: bool,
    log_level: str,
) -> dict[str, object]:
    """Return the settings every harness-run node shares (flat dotted keys).

    Args:
        installed: The server binary (decides whether ``telemetry.enabled`` is written).
        server_id: ``clustering.server.id``.
        namespace: ``clustering.namespace``.
        port: gRPC port on 127.0.0.1.
        data_dir: ``data.dir``.
        nats_servers: ``nats.servers``.
        cursors_partitions: ``cursors.stream.partitions`` (0 disables cursors and groups).
        activity: ``activity.stream.enabled``.
        log_level: ``logging.level``.

    Returns:
        A new dict.
    """
    config: dict[str, object] = {
        "host": LOOPBACK,
        "port": port,
        "data.dir": str(data_dir),
        "logging.level": log_level,
        "clustering.server.id": server_id,
        "clustering.namespace": namespace,
        "nats.servers": nats_servers,
        "cursors.stream.partitions": cursors_partitions,
        "cursors.stream.auto.pause.time": "0s",
        "activity.stream.enabled": activity,
    }
    if installed.supports_telemetry_key:
        config["telemetry.enabled"] = False
    return config


class LiftbridgeServer(Lifecycle):
    """A single-node Liftbridge server on 127.0.0.1 with embedded NATS.

    Each instance owns a fresh temporary directory (config, log, data dir),
    free loopback ports, a unique namespace and server id. Use it as a
    context manager; leaving the block stops the server and removes the
    directory.

    With ``tls`` the server speaks TLS only (mutual TLS and casbin ACLs too, as the
    :class:`~liftbridge_sync.testing.ServerTLS` says), and the readiness probe uses
    the same settings. Certificates can be made at test time::

        certs = generate_certificates(tmp_path, clients=["alice"])
        with LiftbridgeServer(tls=certs.server_tls(mutual=True)) as server:
            client = Client([server.address], tls=server.client_tls(*certs.client("alice")))

    Not thread-safe: start, stop and restart it from one thread.

    Args:
        installed: Server binary to run (default: :func:`install_server`).
        port: gRPC port (default: a free one).
        nats_port: Embedded NATS port (default: a free one).
        cursors_partitions: ``cursors.stream.partitions`` (default 2).
        activity: ``activity.stream.enabled`` (default True).
        config: Extra config keys (nested or dotted), merged last.
        env: Extra environment for the server, e.g. ``LIFTBRIDGE_ENCRYPTION_KEY``.
        log_level: ``logging.level``.
        startup_timeout: Seconds to wait for readiness.
        base_dir: Parent of the temporary directory (default: the system temp dir).
        namespace: ``clustering.namespace`` (default: unique).
        server_id: ``clustering.server.id`` (default: unique).
        tls: TLS, mutual TLS and ACL settings (default: plaintext).
    """

    def __init__(
        self,
        *,
        installed: InstalledServer | None = None,
        port: int | None = None,
        nats_port: int | None = None,
        cursors_partitions: int = 2,
        activity: bool = True,
        config: Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
        log_level: str = "info",
        startup_timeout: float = 30.0,
        base_dir: str | Path | None = None,
        namespace: str | None = None,
        server_id: str | None = None,
        tls: ServerTLS | None = None,
    ) -> None:
        if tls is not None and not isinstance(tls, ServerTLS):
            raise TypeError(f"tls must be a ServerTLS or None, got {type(tls).__name__}")
        self._installed = installed
        self._fixed_ports = port is not None or nats_port is not None
        self._port = port if port is not None else free_port()
        self._nats_port = nats_port if nats_port is not None else free_port(exclude={self._port})
        self._cursors_partitions = cursors_partitions
        self._activity = activity
        self._extra_config = flatten(config or {})
        self._env = dict(env or {})
        self._log_level = log_level
        self._startup_timeout = startup_timeout
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self.namespace = namespace or unique_name("lbtest-")
        self.server_id = server_id or unique_name("s")
        self._run_dir: Path | None = None
        self._node: LiftbridgeProcess | None = None
        self._tls = tls

    # -- properties ----------------------------------------------------------------------

    @property
    def host(self) -> str:
        """Always ``"127.0.0.1"``."""
        return LOOPBACK

    @property
    def port(self) -> int:
        """The gRPC port."""
        return self._port

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"``."""
        return f"{LOOPBACK}:{self._port}"

    @property
    def tls(self) -> ServerTLS | None:
        """The TLS settings, or None for a plaintext server."""
        return self._tls

    def client_tls(
        self, cert: str | Path | None = None, key: str | Path | None = None
    ) -> TLSOptions | None:
        """Client :class:`~liftbridge_sync.TLSOptions` for this server (None if plaintext).

        Args:
            cert: Client certificate (default: the probe's, under mutual TLS).
            key: Its private key.
        """
        return None if self._tls is None else self._tls.client_options(cert, key)

    @property
    def nats_port(self) -> int:
        """The embedded NATS port."""
        return self._nats_port

    @property
    def nats_url(self) -> str:
        """``"nats://127.0.0.1:<nats_port>"``."""
        return f"nats://{LOOPBACK}:{self._nats_port}"

    @property
    def installed(self) -> InstalledServer:
        """The server binary (installing it on first access)."""
        if self._installed is None:
            self._installed = install_server()
        return self._installed

    @property
    def run_dir(self) -> Path:
        """The temporary directory (exists once started, until closed)."""
        if self._run_dir is None:
            raise RuntimeError("the server has not been started")
        return self._run_dir

    @property
    def data_dir(self) -> Path:
        """The server's ``data.dir``."""
        return self.run_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server log (stdout and stderr of every run)."""
        return self._require_node().log_path

    @property
    def config_path(self) -> Path:
        """The generated YAML config file."""
        return self._require_node().config_path

    @property
    def pid(self) -> int | None:
        """PID of the running server, or None."""
        return None if self._node is None else self._node.pid

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._node is not None and self._node.running

    @property
    def exited(self) -> bool:
        """Whether the server was started and its process has ended since (stopped or died)."""
        return self._node is not None and self._node.returncode is not None

    @property
    def returncode(self) -> int | None:
        """Exit code of the last process (negative: killed by that signal), or None
        while it runs or before it was started."""
        return None if self._node is None else self._node.returncode

    def _require_node(self) -> LiftbridgeProcess:
        if self._node is None:
            raise RuntimeError("the server has not been started")
        return self._node

    # -- lifecycle -----------------------------------------------------------------------

    def _build_node(self) -> LiftbridgeProcess:
        run_dir = self.run_dir
        nats_conf = run_dir / "nats.conf"
        nats_conf.write_text(f"listen: {LOOPBACK}:{self._nats_port}\n")
        installed = self.installed
        config = base_config(
            installed,
            server_id=self.server_id,
            namespace=self.namespace,
            port=self._port,
            data_dir=self.data_dir,
            nats_servers=[self.nats_url],
            cursors_partitions=self._cursors_partitions,
            activity=self._activity,
            log_level=self._log_level,
        )
        config["clustering.raft.bootstrap.seed"] = True
        config["nats.embedded.config"] = str(nats_conf)
        if self._tls is not None:
            config.update(self._tls.server_config(run_dir))
        config.update(self._extra_config)
        check_keys(config.keys(), installed.version, installed.supports_telemetry_key)
        return LiftbridgeProcess(
            installed=installed,
            run_dir=run_dir,
            config=config,
            server_id=self.server_id,
            namespace=self.namespace,
            port=self._port,
            nats_url=self.nats_url,
            data_dir=self.data_dir,
            env=self._env,
            require_leader=True,
            startup_timeout=self._startup_timeout,
            tls=self._tls,
        )

    def start(self) -> LiftbridgeServer:
        """Start the server and wait until it is metadata leader and answers FetchMetadata.

        A stopped server is started again on its existing data dir.

        Returns:
            self.

        Raises:
            ServerStartError: If it does not become ready (message has the log tail).
            ServerInstallError: If no server binary is available.
        """
        if self._node is not None:
            if self._node.running:
                raise RuntimeError("the server is already running")
            self._node.start()
            return self
        installed = self.installed
        if self._run_dir is None:
            if self._base_dir is not None:
                self._base_dir.mkdir(parents=True, exist_ok=True)
            self._run_dir = Path(tempfile.mkdtemp(prefix="liftbridge-", dir=self._base_dir))
        for attempt in range(_PORT_RETRIES):
            node = self._build_node()
            try:
                node.start()
            except ServerStartError as exc:
                if self._fixed_ports or not exc.address_in_use or attempt == _PORT_RETRIES - 1:
                    raise
                logger.info("port taken (%s); retrying on new ports", exc.args[0].splitlines()[0])
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self._port = free_port()
                self._nats_port = free_port(exclude={self._port})
                continue
            self._node = node
            break
        logger.info(
            "Liftbridge %s (%s) ready at %s, NATS %s",
            installed.version,
            self.server_id,
            self.address,
            self.nats_url,
        )
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop gracefully (SIGINT, then SIGKILL after ``timeout``); keeps the data dir.

        Returns:
            The exit code, or None if it was not started.
        """
        return None if self._node is None else self._node.stop(timeout)

    def pause(self, timeout: float = 10.0) -> None:
        """Freeze the server (SIGSTOP: a hung host or disk) and wait until all of its
        threads are stopped; its connections stay up and its kernel still acknowledges
        what fits in the buffers. :meth:`resume` lets it go on.

        Raises:
            RuntimeError: not running, or not stopped within ``timeout`` seconds.
        """
        self._require_node().pause(timeout)

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT)."""
        self._require_node().resume()

    def kill(self) -> int | None:
        """Kill with SIGKILL (simulates a crash); keeps the data dir.

        Returns:
            The exit code, or None if it was not started.
        """
        return None if self._node is None else self._node.kill()

    def restart(self, timeout: float = 10.0, *, kill: bool = False) -> None:
        """Stop (or kill) and start again: same data dir, ports and identity.

        Waits until the server is metadata leader again.

        Args:
            timeout: Graceful-stop timeout.
            kill: SIGKILL instead of a graceful stop.
        """
        self._require_node().restart(timeout, kill=kill)

    def log_tail(self, n: int = 40) -> str:
        """Return the last ``n`` log lines ("" if not started)."""
        return "" if self._node is None else self._node.log_tail(n)

    def crash_reason(self) -> str:
        """The log lines that say why the server died: a Go ``panic:`` or ``fatal
        error:`` with the two lines after it, or a fatal log entry (the goroutine dump
        that follows a panic runs to thousands of lines). "" if there are none."""
        return "" if self._node is None else self._node.crash_reason()

    def close(self) -> None:
        """Stop the server and remove its temporary directory."""
        try:
            self.stop()
        finally:
            self.remove_run_dir(self._run_dir)
            self._run_dir = None
            self._node = None

    def __repr__(self) -> str:
        code = None if self._node is None else self._node.returncode
        state = "running" if self.running else "stopped" if code is None else f"exited {code}"
        return f"<LiftbridgeServer {self.server_id} {self.address} {state}>"
