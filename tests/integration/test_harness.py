"""Tests of the real-server harness in ``liftbridge_sync.testing``.

They start real Go Liftbridge servers (built on first use) and an external
``nats-server`` for the cluster. Waits are condition polls with deadlines.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.errors import ConfigurationError
from liftbridge_sync.testing import (
    LEADER_LOG_LINE,
    ExternalLiftbridge,
    InstalledServer,
    LiftbridgeCluster,
    LiftbridgeEndpoint,
    LiftbridgeServer,
    NatsServer,
    ServerInstallError,
    ServerStartError,
    _install,
    docker_unavailable_reason,
    install_server,
)
from liftbridge_sync.testing._config import check_keys, render_yaml
from liftbridge_sync.testing._process import LiftbridgeProcess
from liftbridge_sync.testing._rpc import create_stream, fetch_metadata
from liftbridge_sync.testing._versions import (
    PINNED_PSEUDO_VERSION,
    compare_versions,
    supports_reverse,
    supports_telemetry_key,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def listening_hosts(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on ``port`` (from /proc/net/tcp*)."""
    hosts = set()
    for table, family in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            host_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:
                continue
            if family == 4:
                hosts.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(host_hex)[::-1]))
            else:
                raw = bytes.fromhex(host_hex)
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                hosts.add(socket.inet_ntop(socket.AF_INET6, words))
    return hosts


def stream_meta(response: api_pb2.FetchMetadataResponse, name: str) -> api_pb2.StreamMetadata:
    for meta in response.streamMetadata:
        if meta.name == name:
            return meta
    raise AssertionError(
        f"stream {name!r} not in metadata: {[m.name for m in response.streamMetadata]}"
    )


@pytest.fixture(scope="module")
def installed() -> InstalledServer:
    return install_server()


@pytest.fixture(scope="module")
def server(installed: InstalledServer) -> Iterator[LiftbridgeServer]:
    with LiftbridgeServer(installed=installed) as srv:
        yield srv


# -- single server ---------------------------------------------------------------------------


def test_single_server_is_ready_with_internal_streams(server: LiftbridgeServer) -> None:
    assert server.running and server.pid is not None
    assert server.address == f"127.0.0.1:{server.port}"
    assert server.nats_url == f"nats://127.0.0.1:{server.nats_port}"
    assert LEADER_LOG_LINE in server.log_path.read_text()
    assert server.data_dir.is_dir()

    response = fetch_metadata(server.address)
    assert [(b.id, b.host, b.port) for b in response.brokers] == [
        (server.server_id, "127.0.0.1", server.port)
    ]
    cursors = stream_meta(response, "__cursors")
    assert sorted(cursors.partitions) == [0, 1]
    assert all(p.leader == server.server_id for p in cursors.partitions.values())
    activity = stream_meta(response, "__activity")
    assert activity.subject == f"{server.namespace}.activity"


def test_single_server_listens_on_loopback_only(server: LiftbridgeServer) -> None:
    assert listening_hosts(server.port) == {"127.0.0.1"}
    assert listening_hosts(server.nats_port) == {"127.0.0.1"}


def test_config_file_matches_server_version(server: LiftbridgeServer) -> None:
    text = server.config_path.read_text()
    assert '"cursors.stream.auto.pause.time": "0s"' in text
    assert '"clustering.raft.bootstrap.seed": true' in text
    assert ('"telemetry.enabled": false' in text) == server.installed.supports_telemetry_key


def test_plugin_fixture_serves_an_address(
    liftbridge_server: LiftbridgeEndpoint, liftbridge_address: str
) -> None:
    assert liftbridge_address == liftbridge_server.address
    assert len(fetch_metadata(liftbridge_address).brokers) >= 1


def test_restart_keeps_data_and_address(installed: InstalledServer) -> None:
    with LiftbridgeServer(installed=installed, config={"logging": {"level": "debug"}}) as srv:
        address, first_pid = srv.address, srv.pid
        assert '"logging.level": "debug"' in srv.config_path.read_text()
        create_stream(srv.address, "harness-restart", partitions=2, timeout=10)

        srv.restart()
        assert srv.address == address and srv.pid not in (None, first_pid)
        meta = stream_meta(
            fetch_metadata(srv.address, streams=["harness-restart"]), "harness-restart"
        )
        assert meta.error == api_pb2.StreamMetadata.OK and sorted(meta.partitions) == [0, 1]

        srv.restart(kill=True)  # crash, then recover from the same data dir
        meta = stream_meta(
            fetch_metadata(srv.address, streams=["harness-restart"]), "harness-restart"
        )
        assert meta.error == api_pb2.StreamMetadata.OK


def test_close_stops_process_and_removes_temp_dir(installed: InstalledServer) -> None:
    srv = LiftbridgeServer(installed=installed)
    with srv:
        pid, run_dir = srv.pid, srv.run_dir
        assert pid is not None and run_dir.is_dir()
    assert not srv.running and srv.pid is None
    assert process_gone(pid)
    assert not run_dir.exists()


def test_a_probe_that_breaks_leaves_no_server_running(
    installed: InstalledServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any failure while the harness waits for readiness, not only a ServerStartError,
    # must take the process down: nobody holds a handle to it yet.
    spawned: list[int] = []
    real_spawn = LiftbridgeProcess.spawn

    def spawn(self: LiftbridgeProcess) -> None:
        real_spawn(self)
        assert self.pid is not None
        spawned.append(self.pid)

    def probe(self: LiftbridgeProcess) -> bool:
        raise OSError("scripted: the readiness probe broke")

    monkeypatch.setattr(LiftbridgeProcess, "spawn", spawn)
    monkeypatch.setattr(LiftbridgeProcess, "_probe", probe)
    srv = LiftbridgeServer(installed=installed)
    try:
        with pytest.raises(OSError, match="scripted"):
            srv.start()
        assert spawned
        assert all(process_gone(pid) for pid in spawned)
    finally:
        for pid in spawned:  # without the fix: do not leave it running
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)
        run_dir = srv._run_dir
        srv.close()
    assert run_dir is not None and not run_dir.exists()


_OUTLIVE_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, tempfile
    from pathlib import Path
    from liftbridge_sync.testing import LiftbridgeServer, NatsServer, install_server
    from liftbridge_sync.testing._reaper import watchdog_pid
    nats = NatsServer(Path(tempfile.mkdtemp())).start()
    server = LiftbridgeServer(installed=install_server()).start()
    child = 0
    if sys.argv[1] == "fork":
        child = os.fork()
        if not child:  # runs on after its parent is killed, until the test kills it
            signal.pause()
    print(server.pid, nats.pid, watchdog_pid(), child, flush=True)
    sys.stdin.read()  # until the test kills this process
    """
)


def wait_for_exit(pid: int, timeout: float, what: str) -> None:
    """Wait (on a pidfd: the process need not be our child) until ``pid`` exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    assert ready, f"{what} (pid {pid}) still runs {timeout}s after the test process died"


@pytest.mark.parametrize(
    ("signum", "forked"),
    [(signal.SIGKILL, False), (signal.SIGTERM, False), (signal.SIGKILL, True)],
    ids=["SIGKILL", "SIGTERM", "SIGKILL-with-a-forked-child-alive"],
)
def test_servers_do_not_outlive_a_killed_test_process(
    signum: signal.Signals, forked: bool, tmp_path: Path
) -> None:
    """A test process killed outright (SIGKILL), or by a CI runner's SIGTERM (no atexit
    runs), leaves no server behind: its watchdog kills them once the process is gone,
    even while a child it forked (which inherited the watchdog's pipe) still runs."""
    errors = tmp_path / "stderr"
    child = 0
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", _OUTLIVE_SCRIPT, "fork" if forked else "no-fork"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, errors.read_text()[-3000:]
        server_pid, nats_pid, watchdog, child = (int(word) for word in line.split())
        for pid in (server_pid, nats_pid, watchdog):
            os.kill(pid, 0)  # all three run
        proc.send_signal(signum)
        assert proc.wait(30) == -signum
        wait_for_exit(server_pid, 30, "the Liftbridge server")
        wait_for_exit(nats_pid, 30, "the NATS server")
        wait_for_exit(watchdog, 30, "the watchdog")
        if child:
            os.kill(child, 0)  # the forked child still runs: it did not hold them up
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if child:
            os.kill(child, signal.SIGKILL)  # an orphan now: init reaps it
        for pipe in (proc.stdin, proc.stdout):
            assert pipe is not None
            pipe.close()


def test_stop_is_graceful(installed: InstalledServer) -> None:
    with LiftbridgeServer(installed=installed) as srv:
        assert not srv.exited
        assert srv.stop() == 0
        assert not srv.running and srv.exited and "exited 0" in repr(srv)
        assert srv.run_dir.is_dir()  # kept until the context exits


def test_pause_freezes_every_thread_until_resume(installed: InstalledServer) -> None:
    with LiftbridgeServer(installed=installed) as srv:
        srv.pause()
        pid = srv.pid
        assert pid is not None
        states = {
            (task / "stat").read_text().rpartition(")")[2].split()[0]
            for task in Path(f"/proc/{pid}/task").iterdir()
        }
        assert states <= {"T", "t"}, states
        with pytest.raises(TimeoutError):
            fetch_metadata(srv.address, timeout=1.0)  # nobody answers a frozen server
        srv.resume()
        assert len(fetch_metadata(srv.address).brokers) == 1
        srv.pause()
        assert srv.stop() == 0  # a paused server still stops gracefully


def test_a_raft_timeout_at_startup_is_started_again(
    installed: InstalledServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # v1.9.0 on a loaded machine: the metadata leader's first Raft write times out and
    # the process exits with code 2. The first run of this binary does just that.
    once = tmp_path / "failed-once"
    wrapper = tmp_path / "liftbridge"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ ! -e "{once}" ]; then\n'
        f'  touch "{once}"\n'
        "  echo 'level=info msg=\"Server became metadata leader, performing leader "
        "promotion actions\"'\n"
        "  echo 'level=error msg=\"Error on metadata leadership acquired: Failed to "
        "replicate partition: raft operation timed out\"'\n"
        "  exit 2\n"
        "fi\n"
        f'exec "{installed.path}" "$@"\n'
    )
    wrapper.chmod(0o755)
    flaky = dataclasses.replace(installed, path=wrapper)
    with LiftbridgeServer(installed=flaky) as srv:
        assert once.exists()
        assert len(fetch_metadata(srv.address).brokers) == 1
    assert "exited on a Raft timeout while starting" in caplog.text


def test_a_dead_server_says_why_in_a_few_lines(installed: InstalledServer) -> None:
    with LiftbridgeServer(installed=installed) as srv:
        assert srv.crash_reason() == ""  # a running server's log holds no panic
        srv.kill()
        # What the Go runtime writes when the process panics, then its goroutine dump.
        with srv.log_path.open("a") as log:
            log.write("panic: runtime error: index out of range [3] with length 3\n\n")
            log.write("goroutine 81 [running]:\n")
            log.writelines(f"frame {i}\n" for i in range(5000))
        reason = srv.crash_reason()
    assert reason.splitlines() == [
        "panic: runtime error: index out of range [3] with length 3",
        "",
        "goroutine 81 [running]:",
    ]


def test_startup_failure_reports_log_tail(installed: InstalledServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServerStartError) as info:
            with LiftbridgeServer(installed=installed, port=port, startup_timeout=20):
                pass
    assert "address already in use" in str(info.value)
    assert info.value.address_in_use


def test_unknown_config_key_is_rejected_before_start(installed: InstalledServer) -> None:
    # Local master builds report "dev"; they are treated as the pinned commit.
    if (
        installed.version != "dev"
        and compare_versions(installed.version, PINNED_PSEUDO_VERSION) > 0
    ):
        pytest.skip("key lists are only known up to the pinned commit")
    with pytest.raises(ValueError, match="streams.sync.interval"):
        with LiftbridgeServer(installed=installed, config={"streams.sync.interval": "1s"}):
            pass


# -- cluster ---------------------------------------------------------------------------------


@pytest.mark.cluster
def test_cluster_failover_and_rejoin(installed: InstalledServer) -> None:
    started = time.monotonic()
    cluster = LiftbridgeCluster(3, installed=installed)
    with cluster:
        ids = {node.server_id for node in cluster.servers}
        response = cluster.metadata()
        assert {b.id for b in response.brokers} == ids
        assert len(set(cluster.addresses)) == 3
        cursors = stream_meta(response, "__cursors")
        assert sorted(cursors.partitions) == [0, 1]
        assert set(cursors.partitions[0].replicas) == ids

        create_stream(cluster.addresses[0], "harness-failover", replication_factor=3, timeout=10)
        old = cluster.wait_for_partition_leader("harness-failover", 0, timeout=10)

        killed_at = time.monotonic()
        cluster.kill(old)
        assert not cluster.servers[old].running
        new = cluster.wait_for_new_leader("harness-failover", 0, old, timeout=20)
        failover = time.monotonic() - killed_at
        assert new != old and cluster.servers[new].running

        cluster.restart(old)
        rejoined = cluster.servers[old]
        assert rejoined.running

        def rejoined_sees_new_leader() -> bool:
            view = fetch_metadata(rejoined.address, streams=["harness-failover"])
            part = stream_meta(view, "harness-failover").partitions[0]
            return len(view.brokers) == 3 and part.leader == cluster.servers[new].server_id

        wait_until(rejoined_sees_new_leader, 20, "the restarted node to rejoin")
        pids = [n.pid for n in cluster.servers]
        nats_pid = cluster.nats_pid
        run_dir = cluster.run_dir
    assert all(pid is not None and process_gone(pid) for pid in pids)
    assert nats_pid is not None and process_gone(nats_pid)
    assert not run_dir.exists()
    print(f"failover {failover:.1f}s, total {time.monotonic() - started:.1f}s")


@pytest.mark.cluster
def test_cluster_node_whose_port_was_taken_starts_on_another(
    installed: InstalledServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ports are picked free, but another process (a pytest-xdist worker's server, an
    outgoing connection) may bind one before the node does: that node is started
    again on a new port instead of failing the whole cluster."""
    from liftbridge_sync.testing._net import free_port as real_free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        handed = iter([port])

        def free_port(exclude: frozenset[int] | set[int] = frozenset()) -> int:
            return next(handed, None) or real_free_port(exclude)

        monkeypatch.setattr("liftbridge_sync.testing._cluster.nodes.free_port", free_port)
        with LiftbridgeCluster(3, installed=installed) as cluster:
            node = cluster.servers[0]
            assert node.port != port and node.config["port"] == node.port
            assert "address already in use" in node.log_tail(10_000)
            response = cluster.metadata()
            assert len(response.brokers) == 3
            assert {b.port for b in response.brokers} == {n.port for n in cluster.servers}


@pytest.mark.cluster
@pytest.mark.parametrize("failure", ["unknown key", "node not ready", "interrupted"])
def test_a_cluster_that_fails_to_start_leaves_nothing_running(
    installed: InstalledServer, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """``LiftbridgeCluster(...).start()`` outside a ``with`` block: when it fails, the
    caller may hold no handle to the cluster, so NATS and every node must be gone."""
    from liftbridge_sync.testing._cluster import ClusterNode

    nats_pids: list[int] = []
    node_pids: list[int] = []
    real_spawn, real_wait = ClusterNode.spawn, ClusterNode.wait_ready
    real_nats_start = NatsServer.start

    def nats_start(self: NatsServer) -> NatsServer:
        started = real_nats_start(self)
        assert self.pid is not None
        nats_pids.append(self.pid)
        return started

    def spawn(self: ClusterNode) -> None:
        real_spawn(self)
        assert self.pid is not None
        node_pids.append(self.pid)

    def wait_ready(self: ClusterNode, timeout: float | None = None) -> None:
        if self.index == 2:
            if failure == "interrupted":
                raise KeyboardInterrupt
            raise ServerStartError("scripted: not ready")
        real_wait(self, timeout)

    def check_keys(keys: object, version: str, telemetry: bool) -> None:
        raise ValueError("scripted: unknown key")  # whatever the server version

    monkeypatch.setattr(NatsServer, "start", nats_start)
    monkeypatch.setattr(ClusterNode, "spawn", spawn)
    monkeypatch.setattr(ClusterNode, "wait_ready", wait_ready)
    if failure == "unknown key":
        monkeypatch.setattr("liftbridge_sync.testing._cluster.nodes.check_keys", check_keys)
    cluster = LiftbridgeCluster(3, installed=installed)
    expected: type[BaseException] = {
        "unknown key": ValueError,
        "node not ready": ServerStartError,
        "interrupted": KeyboardInterrupt,
    }[failure]
    try:
        with pytest.raises(expected):
            cluster.start()
        assert len(nats_pids) == 1
        assert len(node_pids) == (0 if failure == "unknown key" else 3)
        assert cluster.nats_pid is None
        assert [pid for pid in nats_pids + node_pids if not process_gone(pid)] == []
        assert cluster.run_dir.is_dir()  # the logs, until close()
    finally:
        run_dir = cluster.run_dir
        cluster.close()
    assert not run_dir.exists()


# -- installer and config (no server needed) -------------------------------------------------


def test_versions_and_feature_flags() -> None:
    assert compare_versions("v1.9.0", PINNED_PSEUDO_VERSION) < 0
    assert compare_versions("v1.9.1", PINNED_PSEUDO_VERSION) > 0
    assert not supports_reverse("v1.9.0") and not supports_telemetry_key("v1.9.0")
    assert supports_reverse(PINNED_PSEUDO_VERSION) and supports_telemetry_key(PINNED_PSEUDO_VERSION)
    assert supports_telemetry_key("v1.9.1-0.20251229185935-945498b4281c")
    assert not supports_reverse("v1.9.1-0.20251229185935-945498b4281c")


def test_render_yaml_and_key_check() -> None:
    text = render_yaml({"clustering": {"raft.bootstrap.peers": ["a", "b"]}, "port": 1})
    assert text == '"clustering.raft.bootstrap.peers": ["a", "b"]\n"port": 1\n'
    with pytest.raises(ValueError, match="telemetry.enabled"):
        check_keys(["telemetry.enabled"], "v1.9.0", telemetry=False)
    check_keys(["telemetry.enabled"], PINNED_PSEUDO_VERSION, telemetry=True)


FAKE_GO = """#!/bin/sh
case "$1" in
  install) echo "go: reading https://proxy.golang.org/...: 403 Forbidden" >&2; exit 1 ;;
  build)
    while [ "$1" != "-o" ]; do shift; done
    printf '#!/bin/sh\\necho "liftbridge version v1.9.0"\\n' > "$2"; chmod +x "$2"; exit 0 ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture
def fresh_install_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("LIFTBRIDGE_SYNC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LIFTBRIDGE_BIN", raising=False)
    monkeypatch.delenv("LIFTBRIDGE_SERVER_VERSION", raising=False)
    monkeypatch.setattr(_install, "_memo", {})
    return tmp_path


def test_auto_install_falls_back_to_release_with_warning(
    fresh_install_state: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bindir = fresh_install_state / "fakebin"
    bindir.mkdir()
    (bindir / "go").write_text(FAKE_GO)
    (bindir / "go").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")

    server = install_server()
    assert server.target == "v1.9.0" and server.version == "v1.9.0"
    assert server.path == fresh_install_state / "cache" / "v1.9.0" / "bin" / "liftbridge"
    assert not server.supports_reverse and not server.supports_telemetry_key
    assert (server.path.parent.parent / "installed.json").is_file()
    assert any(
        "403 Forbidden" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records
    )

    # Reused from the marker without running go again.
    _install._memo.clear()
    (bindir / "go").unlink()
    assert install_server("v1.9.0") == server


def test_missing_go_is_a_clear_error(
    fresh_install_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(fresh_install_state))
    with pytest.raises(ServerInstallError, match="`go` was not found"):
        install_server("pinned")


def test_an_unusable_cache_is_a_clear_install_error(
    fresh_install_state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A build cache that cannot be made (here under a file) is a ServerInstallError
    saying what to do, as documented, not a bare NotADirectoryError (a traceback from
    ``python -m liftbridge_sync.testing install``)."""
    not_a_dir = fresh_install_state / "file"
    not_a_dir.write_text("")
    monkeypatch.setenv("LIFTBRIDGE_SYNC_CACHE", str(not_a_dir / "cache"))
    with pytest.raises(ServerInstallError, match="set LIFTBRIDGE_SYNC_CACHE to a writable"):
        install_server("v1.9.0")
    from liftbridge_sync.testing.__main__ import main

    assert main(["install", "--target", "v1.9.0"]) == 1
    err = capsys.readouterr().err
    assert "error: cannot build the v1.9.0 Liftbridge server" in err
    assert "LIFTBRIDGE_BIN" in err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--port", "70000"], "argument --port: 70000 is out of range (from 1 to 65535)"),
        (["--port", "-5"], "argument --port: -5 is out of range"),
        (["--nats-port", "0"], "argument --nats-port: 0 is out of range"),
        (["--cursors-partitions", "-1"], "--cursors-partitions: -1 is out of range (0 or more)"),
        (["--log-level", "bogus"], "invalid choice: 'bogus' (choose from 'debug', 'info'"),
    ],
)
def test_serve_refuses_bad_values_before_starting_a_server(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """They reached the server and came back as Go panics in its log tail."""
    from liftbridge_sync.testing.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert problem in err
    assert "Liftbridge" not in err  # nothing was started


def test_serve_keeps_the_log_it_names_when_the_server_fails_to_start(
    installed: InstalledServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The error named a log file in the server's temporary directory, which close()
    had just deleted. Now the directory is kept and named."""
    import re
    import tempfile

    from liftbridge_sync.testing.__main__ import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp puts it
    with socket.create_server(("127.0.0.1", 0)) as taken:
        assert main(["serve", "--port", str(taken.getsockname()[1])]) == 1
    err = capsys.readouterr().err
    log = re.search(r" log (/\S+\.log):", err)
    assert log is not None, err
    assert Path(log.group(1)).is_file(), err
    assert "address already in use" in Path(log.group(1)).read_text()
    kept = re.search(r"is kept: (/\S+)", err)
    assert kept is not None, err
    assert Path(log.group(1)).parent == Path(kept.group(1)), err


def test_liftbridge_bin_is_used_as_is(
    fresh_install_state: Path, monkeypatch: pytest.MonkeyPatch, installed: InstalledServer
) -> None:
    monkeypatch.setenv("LIFTBRIDGE_BIN", str(installed.path))
    server = install_server()
    assert server.path == installed.path and server.target == "custom"
    assert server.version == installed.version


# -- plugin in a child pytest ----------------------------------------------------------------

CHILD_TESTS = """
import pytest

def test_address(liftbridge_server, liftbridge_address):
    assert liftbridge_address == liftbridge_server.address

def test_cluster(liftbridge_cluster):
    pass

def test_client(liftbridge_client):
    assert type(liftbridge_client).__name__ == "Client"
"""


def run_child_pytest(
    tmp_path: Path, env: dict[str, str], tests: str = CHILD_TESTS
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_child.py").write_text(textwrap.dedent(tests))
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # The kit under test, whichever checkout the environment's install points at.
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    child_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_plugin_with_external_address(server: LiftbridgeServer, tmp_path: Path) -> None:
    result = run_child_pytest(
        tmp_path, {"LIFTBRIDGE_ADDRESS": server.address, "LIFTBRIDGE_NATS_URL": server.nats_url}
    )
    out = result.stdout + result.stderr
    assert f"liftbridge: external server at {server.address}" in out
    assert "LIFTBRIDGE_ADDRESS is set" in out
    assert "2 passed, 1 skipped" in out, out


@pytest.mark.parametrize(
    ("address", "problem"),
    [("localhost", "must look like 'host:port'"), ("lb:abc", "abc"), ("lb:70000", "70000")],
)
def test_a_bad_external_address_is_refused_where_it_is_read(
    monkeypatch: pytest.MonkeyPatch, address: str, problem: str
) -> None:
    """``LIFTBRIDGE_ADDRESS`` is read with the client's own rules when it is read,
    rather than by the first test that asks for the port (IndexError, ValueError)."""
    monkeypatch.setenv("LIFTBRIDGE_ADDRESS", address)
    with pytest.raises(ConfigurationError, match=f"LIFTBRIDGE_ADDRESS: .*{problem}"):
        ExternalLiftbridge.from_env()


def test_a_blank_external_nats_url_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTBRIDGE_ADDRESS", " [::1]:9292 ")
    monkeypatch.setenv("LIFTBRIDGE_NATS_URL", "  ")
    external = ExternalLiftbridge.from_env()
    assert external == ExternalLiftbridge("[::1]:9292", None)
    assert (external.host, external.port) == ("::1", 9292)


def test_plugin_refuses_a_bad_external_address_once(tmp_path: Path) -> None:
    """The plugin says what is wrong with ``LIFTBRIDGE_ADDRESS`` in its header and as a
    usage error of the fixture, as for a bad ``LIFTBRIDGE_BACKEND``."""
    result = run_child_pytest(tmp_path, {"LIFTBRIDGE_ADDRESS": "localhost"})
    out = result.stdout + result.stderr
    message = "LIFTBRIDGE_ADDRESS: address 'localhost' must look like 'host:port'"
    assert f"liftbridge: {message}" in out, out
    assert f"UsageError: {message}" in out, out
    assert "IndexError:" not in out, out
    assert result.returncode != 0


def test_plugin_docker_backend_skips_without_engine(tmp_path: Path) -> None:
    reason = docker_unavailable_reason()
    if reason is None:
        pytest.skip("a Docker engine is reachable here")
    result = run_child_pytest(tmp_path, {"LIFTBRIDGE_BACKEND": "docker"})
    out = result.stdout + result.stderr
    assert "liftbridge: docker image liftbridge/standalone-dev:latest" in out
    assert "LIFTBRIDGE_BACKEND=docker but Docker engine not reachable" in out, out
    assert "3 skipped" in out, out


CHILD_CRASH_TESTS = """
def test_server_dies(liftbridge_server):
    liftbridge_server.kill()  # as a crash would
    assert False, "scripted failure"

def test_server_gone_later(liftbridge_client):
    assert False, "scripted failure"
"""


def test_plugin_reports_a_dead_server_in_failed_tests(tmp_path: Path) -> None:
    """A user's test failing after the session server died gets that server's log
    tail and exit code in its report (not only "connection refused"), from the plugin
    alone: the child run has no conftest of ours."""
    env = {"LIFTBRIDGE_ADDRESS": "", "LIFTBRIDGE_BACKEND": "local"}
    result = run_child_pytest(tmp_path, env, CHILD_CRASH_TESTS)
    out = result.stdout + result.stderr
    assert "2 failed" in out, out
    header = "liftbridge server 'liftbridge_server' exited (code -9)"
    assert out.count(header) == 2, out
    assert LEADER_LOG_LINE in out.split(header, 1)[1], out
