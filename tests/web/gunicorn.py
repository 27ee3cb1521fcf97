"""Run a WSGI app under a real gunicorn on a Unix socket, and drive it with HTTP requests."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import pytest

ROOT = Path(__file__).resolve().parents[2]


class UnixHTTPConnection(http.client.HTTPConnection):
    """``http.client`` over a Unix socket."""

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Gunicorn:
    """A gunicorn master with its workers; ``stop()`` sends SIGTERM and waits."""

    def __init__(self, app: str, args: Sequence[str], *, chdir: Path, env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="lbgu-")
        self.socket = os.path.join(self._dir, "g.sock")
        self.log_path = Path(self._dir) / "gunicorn.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        command = [
            sys.executable, "-m", "gunicorn", "--bind", f"unix:{self.socket}",
            "--chdir", str(chdir), "--graceful-timeout", "20", "--timeout", "60",
            "--log-level", "info", *args, app,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
        self.returncode: int | None = None

    def __enter__(self) -> Gunicorn:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict[str, object]]:
        """One request on a new connection; the status and the JSON answer."""
        connection = UnixHTTPConnection(self.socket)
        try:
            connection.request(method, path, body=body)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        try:
            answer = json.loads(data) if data else {}
        except ValueError:
            answer = {"raw": data.decode(errors="replace")}
        return response.status, answer

    def wait_ready(self, path: str = "/healthz", timeout: float = 60.0) -> None:
        """Wait until ``path`` answers 200; fail with the log if gunicorn dies or is late."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"gunicorn exited with {self.process.returncode}:\n{self.log}")
            try:
                if self.request("GET", path)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gunicorn not ready after {timeout}s:\n{self.log}")
            time.sleep(0.05)

    def hammer(
        self, path: str, bodies: Sequence[bytes], concurrency: int = 24
    ) -> list[tuple[int, dict[str, object]]]:
        """POST every body to ``path`` from ``concurrency`` threads; answers in body order."""

        def one(index: int) -> tuple[int, dict[str, object]]:
            key = f"k{index % 7}"
            sep = "&" if "?" in path else "?"
            return self.request("POST", f"{path}{sep}key={key}", bodies[index])

        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(one, range(len(bodies))))

    def stop(self, timeout: float = 45.0) -> int:
        """SIGTERM the master and wait for it to exit; its exit code."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"gunicorn still running {timeout}s after SIGTERM:\n{self.log}")
        return self.returncode
