"""Building and caching the Go Liftbridge server binary.

Targets:

* ``"pinned"``: ``go install github.com/liftbridge-io/liftbridge@<PINNED_COMMIT>``.
* ``"v1.9.0"``: a build of the last release through a throwaway module
  (``go install …@v1.9.0`` itself fails where the proxy refuses ``@v/list``).
* ``"auto"``: ``"pinned"``, falling back to ``"v1.9.0"`` with a warning.

Environment variables:

* ``LIFTBRIDGE_BIN``: use this binary as-is (nothing is built).
* ``LIFTBRIDGE_SERVER_VERSION``: the default target (``auto``, ``pinned``, ``v1.9.0``).
* ``LIFTBRIDGE_SYNC_CACHE``: the cache directory (default
  ``$XDG_CACHE_HOME/liftbridge-sync`` or ``~/.cache/liftbridge-sync``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from liftbridge_sync.testing._versions import (
    COMPAT_VERSION,
    PINNED_COMMIT,
    supports_reverse,
    supports_telemetry_key,
)

__all__ = [
    "COMPAT_VERSION",
    "PINNED_COMMIT",
    "InstalledServer",
    "ServerInstallError",
    "cache_dir",
    "detect_version",
    "find_installed",
    "install_server",
]

logger = logging.getLogger(__name__)

MODULE = "github.com/liftbridge-io/liftbridge"
TARGETS = ("auto", "pinned", COMPAT_VERSION)
_ALIASES = {
    "": "auto",
    "auto": "auto",
    "pinned": "pinned",
    "head": "pinned",
    "master": "pinned",
    PINNED_COMMIT: "pinned",
    COMPAT_VERSION: COMPAT_VERSION,
    COMPAT_VERSION.lstrip("v"): COMPAT_VERSION,
}
_MARKER = "installed.json"
_GO_TIMEOUT = 900.0
_VERSION_TIMEOUT = 30.0
#: How long an interrupted build waits for the killed `go` to exit (a SIGKILL: moments).
_REAP_TIMEOUT = 10.0

_memo: dict[tuple[str, str], InstalledServer] = {}
_memo_lock = threading.Lock()


class ServerInstallError(RuntimeError):
    """The Liftbridge server binary could not be built or found."""


@dataclasses.dataclass(frozen=True)
class InstalledServer:
    """A Liftbridge server binary ready to run.

    Immutable, hence thread-safe.

    Attributes:
        path: Absolute path of the ``liftbridge`` executable.
        version: Go module version, e.g. ``"v1.9.0"`` or
            ``"v1.9.1-0.20260106172600-50ac358b41eb"`` (``"dev"`` if unknown).
        target: The install target (``"pinned"``, ``"v1.9.0"`` or ``"custom"``
            for ``LIFTBRIDGE_BIN``).
        supports_reverse: Whether the server implements reverse subscribe
            (the pinned commit or newer).
        supports_telemetry_key: Whether the server accepts ``telemetry.*`` keys.
    """

    path: Path
    version: str
    target: str
    supports_reverse: bool
    supports_telemetry_key: bool

    @classmethod
    def for_binary(cls, path: Path, version: str, target: str) -> InstalledServer:
        """Describe a binary of a known version.

        Args:
            path: The executable.
            version: Its Go module version.
            target: The install target it came from.

        Returns:
            The description, with feature flags derived from ``version``.
        """
        return cls(
            path=path,
            version=version,
            target=target,
            supports_reverse=supports_reverse(version),
            supports_telemetry_key=supports_telemetry_key(version),
        )


def cache_dir() -> Path:
    """Return the cache directory for server builds (not created)."""
    explicit = os.environ.get("LIFTBRIDGE_SYNC_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "liftbridge-sync").resolve()


def _run(
    cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float
) -> subprocess.CompletedProcess[str]:
    logger.debug("running %s", " ".join(cmd))
    with subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except BaseException:
            # subprocess.run, interrupted by Ctrl-C or SIGTERM, kills the child but does
            # not wait for it: the caller could exit with `go` still alive for a moment.
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_REAP_TIMEOUT)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def _module_version_from_buildinfo(binary: Path) -> str | None:
    go = shutil.which("go")
    if go is None:
        return None
    try:
        proc = _run([go, "version", "-m", str(binary)], timeout=_VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "mod" and fields[1] == MODULE:
            return fields[2]
    return None


def detect_version(binary: Path) -> str:
    """Detect the version of a Liftbridge binary.

    Uses ``<binary> --version``; when that says ``dev`` (master builds), the
    module version recorded in the binary (``go version -m``) is used instead.

    Args:
        binary: The executable.

    Returns:
        The version, or ``"dev"`` when neither source knows it.

    Raises:
        ServerInstallError: If the binary cannot be run.
    """
    try:
        proc = _run([str(binary), "--version"], timeout=_VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerInstallError(f"cannot run {binary} --version: {exc}") from exc
    match = re.search(r"version\s+(\S+)", proc.stdout)
    reported = match.group(1) if match else "dev"
    if reported.startswith("v") and reported != "dev":
        return reported
    from_buildinfo = _module_version_from_buildinfo(binary)
    if from_buildinfo and from_buildinfo != "(devel)":
        return from_buildinfo
    return reported


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        started = time.monotonic()
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for another process installing into %s", path.parent)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            logger.debug("install lock acquired after %.1fs", time.monotonic() - started)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _go_env(gobin: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    if gobin is not None:
        env["GOBIN"] = str(gobin)
    return env


def _require_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ServerInstallError(
            "`go` was not found on PATH: install Go (>= 1.25 for the pinned commit) "
            "or set LIFTBRIDGE_BIN to an existing liftbridge binary"
        )
    return go


def _read_marker(target_dir: Path) -> InstalledServer | None:
    marker = target_dir / _MARKER
    binary = target_dir / "bin" / "liftbridge"
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None
    version = data.get("version")
    target = data.get("target")
    if not isinstance(version, str) or not isinstance(target, str):
        return None
    return InstalledServer.for_binary(binary, version, target)


def _write_marker(target_dir: Path, server: InstalledServer, spec: str) -> None:
    data = {
        "target": server.target,
        "version": server.version,
        "spec": spec,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = target_dir / f".{_MARKER}.tmp"
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(target_dir / _MARKER)


def _build_pinned(target_dir: Path) -> str:
    go = _require_go()
    bindir = target_dir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    spec = f"{MODULE}@{PINNED_COMMIT}"
    logger.info("building Liftbridge %s (go install, may take minutes)", spec)
    proc = _run([go, "install", spec], env=_go_env(bindir), timeout=_GO_TIMEOUT)
    if proc.returncode != 0:
        raise ServerInstallError(f"`go install {spec}` failed:\n{proc.stdout.strip()}")
    return spec


_COMPAT_GO_MOD = """module liftbridge-sync-server-build

go 1.17

require {module} {version}
"""

_COMPAT_TOOLS_GO = """//go:build tools

package tools

import _ "{module}"
"""


def _build_compat(target_dir: Path) -> str:
    go = _require_go()
    bindir = target_dir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    spec = f"{MODULE}@{COMPAT_VERSION}"
    logger.info("building Liftbridge %s (throwaway module, may take minutes)", spec)
    with tempfile.TemporaryDirectory(prefix="liftbridge-build-") as tmp:
        workdir = Path(tmp)
        (workdir / "go.mod").write_text(
            _COMPAT_GO_MOD.format(module=MODULE, version=COMPAT_VERSION)
        )
        (workdir / "tools.go").write_text(_COMPAT_TOOLS_GO.format(module=MODULE))
        env = _go_env()
        env["GOFLAGS"] = "-mod=mod"
        env.pop("GOBIN", None)
        proc = _run(
            [go, "build", "-o", str(bindir / "liftbridge"), MODULE],
            cwd=workdir,
            env=env,
            timeout=_GO_TIMEOUT,
        )
    if proc.returncode != 0:
        raise ServerInstallError(f"building {spec} failed:\n{proc.stdout.strip()}")
    return spec


_BIN_HINT = "or set LIFTBRIDGE_BIN to an existing liftbridge binary"


def _install_target(target: str) -> InstalledServer:
    root = cache_dir()
    try:
        return _install_target_into(root, target)
    except OSError as exc:
        # An unusable cache (not a directory, not writable, disk full) or a `go` that
        # cannot be run: say so, and what to do, instead of a bare OSError.
        raise ServerInstallError(
            f"cannot build the {target} Liftbridge server into {root}: {exc}; set "
            f"LIFTBRIDGE_SYNC_CACHE to a writable directory {_BIN_HINT}"
        ) from exc


def _install_target_into(root: Path, target: str) -> InstalledServer:
    target_dir = root / target
    cached = _read_marker(target_dir)
    if cached is not None:
        return cached
    with _file_lock(root / f"{target}.lock"):
        cached = _read_marker(target_dir)
        if cached is not None:
            return cached
        try:
            spec = _build_pinned(target_dir) if target == "pinned" else _build_compat(target_dir)
        except subprocess.TimeoutExpired as exc:
            raise ServerInstallError(f"building the {target} server timed out: {exc}") from exc
        binary = target_dir / "bin" / "liftbridge"
        version = detect_version(binary)
        if version == "dev" and target == "pinned":
            version = f"pinned-{PINNED_COMMIT}"
        server = InstalledServer.for_binary(binary, version, target)
        _write_marker(target_dir, server, spec)
        logger.info("installed Liftbridge %s at %s", server.version, binary)
        return server


def _from_env_binary(value: str) -> InstalledServer:
    binary = Path(value).expanduser()
    if not binary.is_absolute():
        found = shutil.which(value)
        binary = Path(found) if found else binary.resolve()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise ServerInstallError(f"LIFTBRIDGE_BIN={value!r} is not an executable file")
    return InstalledServer.for_binary(binary, detect_version(binary), "custom")


def _resolve_target(target: str) -> str:
    if target == "auto":
        target = os.environ.get("LIFTBRIDGE_SERVER_VERSION", "auto")
    resolved = _ALIASES.get(target.strip().lower() if target.strip() else "")
    if resolved is None:
        raise ValueError(f"unknown Liftbridge server target {target!r}; expected one of {TARGETS}")
    return resolved


def install_server(target: str = "auto") -> InstalledServer:
    """Return a Liftbridge server binary, building it on first use.

    Builds are cached (see :func:`cache_dir`) and guarded by a file lock, so
    concurrent processes build once. Results are memoised per process.

    Args:
        target: ``"auto"`` (default; ``LIFTBRIDGE_SERVER_VERSION`` overrides it),
            ``"pinned"`` or ``"v1.9.0"``. Ignored when ``LIFTBRIDGE_BIN`` is set.

    Returns:
        The installed server.

    Raises:
        ServerInstallError: If ``go`` is missing or cannot be run, the cache
            directory cannot be used, or every build failed; the message contains the
            go output.
        ValueError: If ``target`` is unknown.
    """
    env_bin = os.environ.get("LIFTBRIDGE_BIN", "")
    key = (env_bin, "" if env_bin else _resolve_target(target))
    with _memo_lock:
        cached = _memo.get(key)
        if cached is not None:
            return cached
        if env_bin:
            server = _from_env_binary(env_bin)
        elif key[1] == "auto":
            try:
                server = _install_target("pinned")
            except ServerInstallError as exc:
                logger.warning(
                    "cannot build the pinned Liftbridge commit %s, falling back to %s: %s",
                    PINNED_COMMIT,
                    COMPAT_VERSION,
                    exc,
                )
                try:
                    server = _install_target(COMPAT_VERSION)
                except ServerInstallError as exc2:
                    raise ServerInstallError(
                        f"no Liftbridge server could be built.\n--- pinned ---\n{exc}\n"
                        f"--- {COMPAT_VERSION} ---\n{exc2}"
                    ) from exc2
        else:
            server = _install_target(key[1])
        _memo[key] = server
        return server


def find_installed(target: str = "auto") -> InstalledServer | None:
    """Return the server :func:`install_server` would use, without building anything.

    Args:
        target: As for :func:`install_server`.

    Returns:
        The binary from ``LIFTBRIDGE_BIN`` or the build cache, or None if a
        build would be needed.
    """
    env_bin = os.environ.get("LIFTBRIDGE_BIN", "")
    if env_bin:
        try:
            return install_server(target)
        except ServerInstallError:
            return None
    resolved = _resolve_target(target)
    with _memo_lock:
        memoised = _memo.get(("", resolved))
    if memoised is not None:
        return memoised
    candidates = ["pinned", COMPAT_VERSION] if resolved == "auto" else [resolved]
    for candidate in candidates:
        found = _read_marker(cache_dir() / candidate)
        if found is not None:
            return found
    return None
