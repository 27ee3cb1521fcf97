"""One ``liftbridge`` process: spawn, readiness, signals, restarts and its log."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from liftbridge_sync.testing._config import KNOWN_KEYS_V1_9_0, TELEMETRY_KEYS, write_config
from liftbridge_sync.testing._install import InstalledServer
from liftbridge_sync.testing._reaper import track, untrack
from liftbridge_sync.testing._serverlog import ServerLog

if TYPE_CHECKING:
    from liftbridge_sync.testing._tls import ServerTLS

__all__ = ["LEADER_LOG_LINE", "LiftbridgeProcess", "ServerStartError", "internal_streams"]

logger = logging.getLogger(__name__)

#: Logged by the node that wins the metadata Raft election (v1.9.0 and the pinned commit).
LEADER_LOG_LINE = "Server became metadata leader, performing leader promotion actions"
_ADDRESS_IN_USE = "address already in use"
#: What v1.9.0 logs when a Raft operation of its startup timed out (then it exits 2).
_RAFT_TIMED_OUT = "raft operation timed out"
#: Seconds a node that must become metadata leader gets before it is started again.
_ELECTION_PATIENCE = 8.0
_START_ATTEMPTS = 3
_POLL_INTERVAL = 0.05

# Inherited LIFTBRIDGE_<KEY> variables would override the generated config (viper
# AutomaticEnv), so they are not passed on unless given explicitly.
_CONFIG_ENV_NAMES = frozenset(
    f"LIFTBRIDGE_{key.upper()}" for key in KNOWN_KEYS_V1_9_0 | TELEMETRY_KEYS
)


def internal_streams(config: Mapping[str, object]) -> frozenset[str]:
    """Return the internal streams a server with ``config`` creates once it has a leader."""
    names = set()
    partitions = config.get("cursors.stream.partitions", 0)
    if isinstance(partitions, int) and partitions > 0:
        names.add("__cursors")
    if config.get("activity.stream.enabled") is True:
        names.add("__activity")
    return frozenset(names)


class ServerStartError(RuntimeError):
    """A Liftbridge server did not become ready; the message ends with its log tail."""

    def __init__(self, message: str, *, address_in_use: bool = False) -> None:
        super().__init__(message)
        #: Whether the log says a port was taken (the caller may retry on new ports).
        self.address_in_use = address_in_use


class LiftbridgeProcess:
    """A ``liftbridge`` process running from a fixed config file and data dir.

    The process is started in its own session, its stdout and stderr go to
    ``log_path`` (appended across restarts), and only its own PID is signalled.

    Not thread-safe: drive one instance from one thread at a time.

    Args:
        installed: The server binary.
        run_dir: Directory for the config file and log (must exist).
        config: Flat or nested config mapping (written when starting).
        server_id: ``clustering.server.id``.
        namespace: ``clustering.namespace``.
        port: gRPC port on 127.0.0.1.
        nats_url: URL of the NATS server the node uses.
        data_dir: ``data.dir``.
        env: Extra environment variables for the process.
        require_leader: Readiness also requires the metadata-leader log line
            (true for single nodes; cluster followers never log it).
        startup_timeout: Seconds to wait for readiness.
        tls: The server's TLS settings (its ``tls.*`` keys must be in ``config``);
            the readiness probe then speaks TLS with them, presenting
            ``tls.client_cert`` under mutual TLS. ``None``: plaintext.
    """

    def __init__(
        self,
        *,
        installed: InstalledServer,
        run_dir: Path,
        config: Mapping[str, object],
        server_id: str,
        namespace: str,
        port: int,
        nats_url: str,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        require_leader: bool = True,
        startup_timeout: float = 30.0,
        tls: ServerTLS | None = None,
    ) -> None:
        self.installed = installed
        self.run_dir = run_dir
        self.config: dict[str, object] = dict(config)
        self.server_id = server_id
        self.namespace = namespace
        self.host = "127.0.0.1"
        self.port = port
        self.nats_url = nats_url
        self.data_dir = data_dir
        self.config_path = run_dir / f"liftbridge-{server_id}.yaml"
        self.log_path = run_dir / f"liftbridge-{server_id}.log"
        self.log = ServerLog(self.log_path)
        self.require_leader = require_leader
        self.startup_timeout = startup_timeout
        self.tls = tls
        self._probe_error: str | None = None
        self._extra_env = dict(env or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None

    # -- properties ----------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"``, the gRPC address."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the running process, or None."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit code of the last process, or None while running or never started."""
        return None if self._proc is None else self._proc.poll()

    # -- log -----------------------------------------------------------------------------

    def log_tail(self, n: int = 40) -> str:
        """Return the last ``n`` lines of the server log (all runs)."""
        return self.log.tail(n)

    def log_since_start(self) -> str:
        """Return the log written by the current (or last) run."""
        return self.log.since_run_start()

    def crash_reason(self) -> str:
        """Why the server died, from its log (see :meth:`.ServerLog.crash_reason`)."""
        return self.log.crash_reason()

    def is_metadata_leader_logged(self) -> bool:
        """Whether this run has logged winning a metadata leader election."""
        return LEADER_LOG_LINE in self.log_since_start()

    # -- lifecycle -----------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k.upper() not in _CONFIG_ENV_NAMES}
        env.update(self._extra_env)
        return env

    def spawn(self) -> None:
        """Start the process without waiting for readiness.

        Raises:
            RuntimeError: If it is already running.
        """
        if self.running:
            raise RuntimeError(f"Liftbridge {self.server_id} is already running")
        self.reap()
        write_config(self.config_path, self.config)
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.log.mark_run_start(log.tell())
            self._proc = subprocess.Popen(
                [str(self.installed.path), "--config", str(self.config_path)],
                cwd=self.run_dir,
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started_at = time.monotonic()
        self.ready_at = None
        track(self, self._proc.pid)
        logger.debug(
            "started liftbridge %s (pid %d) on %s", self.server_id, self._proc.pid, self.address
        )

    def _probe(self) -> bool:
        import grpc

        from liftbridge_sync.testing._rpc import fetch_metadata

        try:
            response = fetch_metadata(self.address, timeout=5.0, tls=self.tls)
        except TimeoutError as exc:
            self._probe_error = str(exc)
            return False
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
            self._probe_error = f"{code.name}: {details}"
            if "not authorized" in (details or ""):
                # ACLs deny the probe's identity: waiting cannot help.
                self.kill()
                raise self._start_error(
                    f"refused the readiness probe's FetchMetadata ({details}); the authz "
                    "policy must allow the probe's client certificate CN FetchMetadata on '*'"
                ) from None
            return False
        self._probe_error = None
        streams = {meta.name for meta in response.streamMetadata}
        return len(response.brokers) > 0 and internal_streams(self.config) <= streams

    def check_ready(self) -> bool:
        """One readiness probe.

        Requires the leader log line (if ``require_leader``) and a FetchMetadata
        that lists the configured internal streams (``__cursors``, ``__activity``).
        """
        if self.require_leader and not self.is_metadata_leader_logged():
            return False
        return self._probe()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll until :meth:`check_ready` holds.

        Args:
            timeout: Seconds (default: ``startup_timeout``).

        Raises:
            ServerStartError: If the process exits or the deadline passes; the
                process is then killed.
        """
        budget = self.startup_timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        while True:
            if not self.running:
                code = self.returncode
                self.reap()
                raise self._start_error(f"exited with code {code} during startup")
            if self.check_ready():
                self.ready_at = time.monotonic()
                if self.started_at is not None:
                    logger.debug(
                        "liftbridge %s ready after %.2fs",
                        self.server_id,
                        self.ready_at - self.started_at,
                    )
                return
            if time.monotonic() >= deadline:
                self.kill()
                last = f" (last probe: {self._probe_error})" if self._probe_error else ""
                raise self._start_error(f"was not ready within {budget:.0f}s{last}")
            time.sleep(_POLL_INTERVAL)

    def _start_error(self, what: str) -> ServerStartError:
        log = self.log_since_start()
        tail = "\n".join(log.splitlines()[-40:])
        return ServerStartError(
            f"Liftbridge {self.installed.version} ({self.server_id}, {self.address}) {what}; "
            f"log {self.log_path}:\n{tail}",
            address_in_use=_ADDRESS_IN_USE in log,
        )

    def start(self) -> None:
        """Spawn the process and wait until it is ready.

        A node that must win the metadata election and has not within
        ``_ELECTION_PATIENCE`` seconds is killed and started again (same data and
        ports), up to ``_START_ATTEMPTS`` times within ``startup_timeout``: v1.9.0
        sometimes replays its Raft log after a restart and then never logs the
        election (seen in about 1 of 8 single-node restarts here), while a fresh
        process wins it at once.

        Raises:
            ServerStartError: See :meth:`wait_ready`.
        """
        deadline = time.monotonic() + self.startup_timeout
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.spawn()
            remaining = max(0.0, deadline - time.monotonic())
            patience = min(remaining, _ELECTION_PATIENCE) if self.require_leader else remaining
            try:
                self.wait_ready(patience)
                return
            except ServerStartError as exc:
                stalled = (
                    self.require_leader
                    and not exc.address_in_use
                    and not self.is_metadata_leader_logged()
                    and "was not ready" in str(exc)
                )
                # v1.9.0 on a loaded machine: the new metadata leader's Raft write of an
                # internal stream times out, and the process exits with code 2.
                raft_timeout = (
                    self.require_leader
                    and "during startup" in str(exc)
                    and _RAFT_TIMED_OUT in self.log_since_start()
                )
                if (
                    not (stalled or raft_timeout)
                    or attempt == _START_ATTEMPTS
                    or time.monotonic() >= deadline
                ):
                    raise
                why = (
                    "exited on a Raft timeout while starting"
                    if raft_timeout
                    else f"did not win the metadata election within {patience:.0f}s"
                )
                logger.warning(
                    "liftbridge %s %s (attempt %d); starting it again",
                    self.server_id,
                    why,
                    attempt,
                )
            except BaseException:
                # Not a start failure (a probe that broke, an interrupt): the process
                # must not outlive it, as nobody would hold a handle to stop it.
                self.kill()
                raise

    def reap(self) -> None:
        """Collect the exit status of a finished process (avoids zombies)."""
        if self._proc is not None and self._proc.poll() is not None:
            untrack(self)

    def interrupt(self) -> None:
        """Send SIGINT (a graceful stop) without waiting; see :meth:`stop`."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)

    def pause(self, timeout: float = 10.0) -> None:
        """Stop the process where it stands (SIGSTOP: a hung host or disk) and wait until
        every one of its threads is stopped, so that nothing sent afterwards is answered.

        The kernel stops a busy process's threads as each next enters it: on a loaded
        machine a server signalled but not yet stopped still answers for a moment.

        Raises:
            RuntimeError: not running, or not all stopped within ``timeout`` seconds.
        """
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"liftbridge {self.server_id} is not running")
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not _all_threads_stopped(proc.pid):
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"liftbridge {self.server_id} (pid {proc.pid}) not stopped after {timeout}s"
                )
            time.sleep(0.005)  # polling /proc: the kernel offers no wait for this

    def resume(self) -> None:
        """Let a paused process go on (SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop gracefully: SIGINT, then SIGKILL after ``timeout`` seconds.

        Args:
            timeout: Seconds to wait for a graceful exit.

        Returns:
            The exit code, or None if it was never started.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.send_signal(signal.SIGCONT)  # a paused server must run to stop
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "liftbridge %s (pid %d) ignored SIGINT for %.0fs; killing it",
                    self.server_id,
                    proc.pid,
                    timeout,
                )
                proc.kill()
                proc.wait()
        self.reap()
        return proc.returncode

    def end_with(self, signum: signal.Signals, timeout: float = 10.0) -> int | None:
        """Send ``signum`` (SIGINT: v1.9.0's graceful stop; SIGTERM: it dies at once,
        like a crash with a cleaner socket close) and wait for the process to go,
        killing it after ``timeout`` seconds.

        Returns:
            The exit code, or None if it was never started.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signum)
            proc.send_signal(signal.SIGCONT)  # a paused server must run to act on it
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.reap()
        return proc.returncode

    def kill(self) -> int | None:
        """Kill with SIGKILL (a crash) and wait for the process to go.

        Returns:
            The exit code, or None if it was never started.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self.reap()
        return proc.returncode

    def restart(self, timeout: float = 10.0, *, kill: bool = False) -> None:
        """Stop (or kill) and start again with the same config, ports and data.

        Args:
            timeout: Graceful-stop timeout in seconds.
            kill: SIGKILL instead of a graceful stop.

        Raises:
            ServerStartError: If the server does not become ready again.
        """
        if kill:
            self.kill()
        else:
            self.stop(timeout)
        self.start()


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (Linux ``/proc``; where
    there is none, the signal is trusted)."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return not Path("/proc/self").exists()
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread has gone
            continue
        # The state follows the command name, which is in parentheses and may hold any.
        if stat[stat.rindex(")") + 2] not in "Tt":
            return False
    return True
