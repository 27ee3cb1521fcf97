"""pytest plugin: real Liftbridge servers as fixtures.

Registered through the ``pytest11`` entry point ``liftbridge_sync``. Importing
it is cheap: servers, gRPC and Docker are only touched when a fixture is used.

Fixtures:

* ``liftbridge_server`` (session): a :class:`~liftbridge_sync.testing.LiftbridgeServer`,
  a Docker container, or the external server named by ``LIFTBRIDGE_ADDRESS``.
* ``liftbridge_address`` (session): its ``host:port``.
* ``liftbridge_cluster`` (module): a 3-node
  :class:`~liftbridge_sync.testing.LiftbridgeCluster` (local backend only).
* ``liftbridge_client`` (function): ``liftbridge_sync.Client([address])``, closed afterwards.

A failed test that used a harness server (a fixture value that is a
:class:`~liftbridge_sync.testing.LiftbridgeServer` or
:class:`~liftbridge_sync.testing.LiftbridgeCluster`) whose process has exited gets a
report section with that server's crash reason and log tail: a server that died
mid-session otherwise shows only as "connection refused" in every later test.

Environment:

* ``LIFTBRIDGE_ADDRESS`` / ``LIFTBRIDGE_NATS_URL``: use an external server.
* ``LIFTBRIDGE_BACKEND``: ``local`` (default: build and run the Go server),
  ``docker`` (testcontainers) or ``auto`` (docker when an engine answers, else local).
* ``LIFTBRIDGE_DOCKER_IMAGE``: image for the docker backend.
* ``LIFTBRIDGE_BIN``, ``LIFTBRIDGE_SERVER_VERSION``, ``LIFTBRIDGE_SYNC_CACHE``:
  see :func:`~liftbridge_sync.testing.install_server`.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from liftbridge_sync.client import Client
    from liftbridge_sync.testing._cluster import ClusterNode, LiftbridgeCluster
    from liftbridge_sync.testing._external import ExternalLiftbridge, LiftbridgeEndpoint

__all__ = [
    "liftbridge_address",
    "liftbridge_client",
    "liftbridge_cluster",
    "liftbridge_server",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_makereport",
]

_BACKENDS = ("local", "docker", "auto")


def _backend() -> str:
    backend = os.environ.get("LIFTBRIDGE_BACKEND", "local").strip().lower() or "local"
    if backend not in _BACKENDS:
        raise pytest.UsageError(
            f"LIFTBRIDGE_BACKEND={backend!r} is not one of {', '.join(_BACKENDS)}"
        )
    return backend


def _external() -> ExternalLiftbridge | None:
    """The server named by ``LIFTBRIDGE_ADDRESS``, None when unset; a bad address is a
    usage error, as a bad ``LIFTBRIDGE_BACKEND`` is (not an error of each test
    that reads its port)."""
    from liftbridge_sync.errors import ConfigurationError
    from liftbridge_sync.testing._external import ExternalLiftbridge

    try:
        return ExternalLiftbridge.from_env()
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from exc


def _resolve_backend() -> tuple[str, str | None]:
    """Return ``(backend, docker_problem)`` with ``auto`` resolved."""
    backend = _backend()
    if backend == "local":
        return backend, None
    from liftbridge_sync.testing._docker import docker_unavailable_reason

    problem = docker_unavailable_reason()
    if backend == "auto":
        return ("local" if problem else "docker"), None
    return backend, problem


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers this plugin's users rely on."""
    config.addinivalue_line("markers", "integration: talks to a real Liftbridge server")
    config.addinivalue_line("markers", "cluster: needs a 3-node Liftbridge cluster")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show which Liftbridge server the fixtures will use (never builds one)."""
    try:
        external = _external()
        if external is not None:
            return [f"liftbridge: external server at {external.address}"]
        backend = _backend()
    except pytest.UsageError as exc:
        return [f"liftbridge: {exc}"]
    if backend == "docker":
        from liftbridge_sync.testing._docker import DEFAULT_IMAGE

        image = os.environ.get("LIFTBRIDGE_DOCKER_IMAGE", DEFAULT_IMAGE)
        return [f"liftbridge: docker image {image}"]
    from liftbridge_sync.testing._install import cache_dir, find_installed

    try:
        installed = find_installed()
    except ValueError as exc:
        return [f"liftbridge: {exc}"]
    if installed is None:
        return [f"liftbridge: server not built yet (built on first use into {cache_dir()})"]
    return [
        f"liftbridge: server {installed.version} ({installed.target}) at {installed.path}"
        + (" [backend auto]" if backend == "auto" else "")
    ]


def _exited_servers(name: str, value: object) -> list[tuple[str, str]]:
    """Report sections for the harness servers in fixture ``name`` whose process exited."""
    from liftbridge_sync.testing._cluster import LiftbridgeCluster
    from liftbridge_sync.testing._server import LiftbridgeServer

    dead: list[tuple[str, LiftbridgeServer | ClusterNode]] = []
    if isinstance(value, LiftbridgeServer):
        if value.exited:
            dead.append((f"liftbridge server {name!r}", value))
    elif isinstance(value, LiftbridgeCluster):
        dead.extend(
            (f"liftbridge cluster {name!r} node {node.index} ({node.server_id})", node)
            for node in value.servers
            if node.returncode is not None
        )
    return [
        (
            f"{title} exited (code {server.returncode})",
            f"{server.crash_reason()}\n...\n{server.log_tail(60)}",
        )
        for title, server in dead
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A server that died mid-session fails every later test with "connection refused":
    put its own last words (a Go panic, usually) into the report of each failure."""
    report = yield
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            report.sections.extend(_exited_servers(name, value))
    return report


@pytest.fixture(scope="session")
def liftbridge_server() -> Iterator[LiftbridgeEndpoint]:
    """A running single-node Liftbridge server for the whole session.

    Yields:
        An object with ``address`` and ``nats_url`` (a
        :class:`~liftbridge_sync.testing.LiftbridgeServer` for the local backend).
    """
    external = _external()
    if external is not None:
        yield external
        return
    backend, problem = _resolve_backend()
    if backend == "docker":
        if problem:
            pytest.skip(f"LIFTBRIDGE_BACKEND=docker but {problem}")
        from liftbridge_sync.testing._docker import DockerLiftbridgeServer

        with DockerLiftbridgeServer() as container:
            yield container
        return
    from liftbridge_sync.testing._server import LiftbridgeServer

    with LiftbridgeServer() as server:
        yield server


@pytest.fixture(scope="session")
def liftbridge_address(liftbridge_server: LiftbridgeEndpoint) -> str:
    """``host:port`` of :func:`liftbridge_server`."""
    return liftbridge_server.address


@pytest.fixture(scope="module")
def liftbridge_cluster() -> Iterator[LiftbridgeCluster]:
    """A 3-node Liftbridge cluster with its own NATS, shared by a test module.

    Skipped when ``LIFTBRIDGE_ADDRESS`` points at an external server or the
    docker backend is selected.

    Yields:
        The running cluster.
    """
    if os.environ.get("LIFTBRIDGE_ADDRESS"):
        pytest.skip("LIFTBRIDGE_ADDRESS is set: the cluster fixture needs the local backend")
    if _backend() == "docker":
        pytest.skip("LIFTBRIDGE_BACKEND=docker: the cluster fixture needs the local backend")
    from liftbridge_sync.testing._cluster import LiftbridgeCluster

    with LiftbridgeCluster(size=3) as cluster:
        yield cluster


@pytest.fixture
def liftbridge_client(liftbridge_address: str) -> Iterator[Client]:
    """A ``liftbridge_sync.Client`` connected to :func:`liftbridge_server`, closed afterwards.

    Yields:
        The client.
    """
    from liftbridge_sync.client import Client

    client = Client([liftbridge_address])
    try:
        yield client
    finally:
        client.close()
