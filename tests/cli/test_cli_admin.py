"""create, delete, pause, readonly, metadata, cursor and the error contract, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from liftbridge_sync import Client
from tests.cli.conftest import CLI, Run, cli_env
from tests.integration.conftest import unique

pytestmark = pytest.mark.integration


def test_create_metadata_delete_with_exit_codes(run: Run, liftbridge_client: Client) -> None:
    name = unique("cli")
    created = run("create", name, "--partitions", "3", "--subject", f"{name}-subj")
    assert created.returncode == 0, created.stderr
    info = liftbridge_client.fetch_metadata(name).streams[name]
    assert (info.subject, len(info.partitions)) == (f"{name}-subj", 3)

    again = run("create", name)
    assert again.returncode == 4
    assert again.stderr.count("\n") == 1 and "exists" in again.stderr
    assert run("create", name, "--exist-ok").returncode == 0

    meta = run("metadata", name, "--json")
    assert meta.returncode == 0, meta.stderr
    record = json.loads(meta.stdout)
    assert sorted(record["streams"][name]["partitions"]) == ["0", "1", "2"]
    broker_ids = {b["id"] for b in record["brokers"]}
    assert record["streams"][name]["partitions"]["0"]["leader"] in broker_ids

    table = run("metadata", name)
    assert table.returncode == 0
    assert "Brokers" in table.stdout and f"{name}-subj.2" in table.stdout

    assert run("delete", name).returncode == 0
    assert name not in liftbridge_client.fetch_metadata().streams
    gone = run("delete", name)
    assert gone.returncode == 3 and "Traceback" not in gone.stderr
    missing = run("metadata", name)
    assert missing.returncode == 3 and "no such stream" in missing.stderr


def test_pause_and_readonly(run: Run, stream: str, liftbridge_client: Client) -> None:
    assert run("pause", stream, "-P", "1").returncode == 0
    partitions = liftbridge_client.fetch_metadata(stream).streams[stream].partitions
    assert (partitions[0].paused, partitions[1].paused) == (False, True)

    assert run("readonly", stream).returncode == 0
    refused = run("publish", stream, "x")
    assert refused.returncode == 6, refused.stderr
    assert refused.stderr.startswith("liftbridge-sync: error: 1 of 1 messages failed")
    assert "Traceback" not in refused.stderr

    assert run("readonly", stream, "--off").returncode == 0
    assert run("publish", stream, "x").returncode == 0
    assert liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset == 0


def test_cursor_set_and_get(run: Run, stream: str, liftbridge_client: Client) -> None:
    assert run("cursor", "get", stream, "billing").stdout.strip() == "-1"
    assert run("cursor", "set", stream, "billing", "41", "-P", "1").returncode == 0
    assert liftbridge_client.fetch_cursor("billing", stream, 1) == 41
    got = run("cursor", "get", stream, "billing", "--partition", "1")
    assert (got.returncode, got.stdout.strip()) == (0, "41")


def test_refused_connection_is_one_line_and_exit_5(liftbridge_address: str) -> None:
    env = cli_env(liftbridge_address)
    refused = subprocess.run(
        [*CLI, "-a", "127.0.0.1:1", "--timeout", "1", "metadata"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode == 5
    assert refused.stderr.startswith("liftbridge-sync: error: ")
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr

    debug = subprocess.run(
        [*CLI, "-a", "127.0.0.1:1", "--timeout", "1", "--debug", "metadata"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert "BrokerUnavailableError" in debug.stderr

    bad = subprocess.run(
        [*CLI, "-a", "no-port", "metadata"], capture_output=True, text=True, env=env, timeout=60
    )
    assert bad.returncode == 2 and "host:port" in bad.stderr
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("liftbridge-sync: error: ")


def test_console_script_and_help(liftbridge_address: str) -> None:
    script = Path(sys.executable).with_name("liftbridge-sync")
    assert script.exists(), "the console script is not installed: pip install -e '.[cli]'"
    for command in ([str(script)], CLI):
        result = subprocess.run(
            [*command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env=cli_env(liftbridge_address),
        )
        assert result.returncode == 0
        for name in ("create", "subscribe", "publish", "bench", "cursor", "metadata"):
            assert name in result.stdout
    usage = subprocess.run([*CLI, "frobnicate"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "No such command" in usage.stderr


def test_without_the_cli_extra_python_m_explains() -> None:
    script = (
        "import sys, runpy; sys.modules['click'] = None; "
        "runpy.run_module('liftbridge_sync', run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 1
    assert "liftbridge-sync[cli]" in result.stderr and "Traceback" not in result.stderr


def test_bench(run: Run) -> None:
    result = run("bench", "--count", "300", "--size", "64", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["received"] == record["messages"] == 300
    assert record["publish_per_second"] > 0


def test_progress_bars_only_on_a_terminal(liftbridge_address: str, tmp_path: Path) -> None:
    """bench and publish --file draw progress on a terminal, and nothing into a pipe."""
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"line {i}\n" for i in range(300)))
    name = unique("cli")
    env = cli_env(liftbridge_address)
    piped = subprocess.run(
        [*CLI, "bench", "--count", "300", "--stream", name, "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert piped.returncode == 3  # --stream names a stream that does not exist yet
    assert subprocess.run([*CLI, "create", name], env=env, timeout=60).returncode == 0
    try:
        for args in (
            ["bench", "--count", "300", "--stream", name],
            ["publish", name, "-f", str(source)],
        ):
            piped = subprocess.run(
                [*CLI, *args], capture_output=True, text=True, env=env, timeout=60
            )
            assert piped.returncode == 0 and "publishing" not in piped.stderr + piped.stdout
            assert _on_a_terminal([*CLI, *args], env)
    finally:
        subprocess.run([*CLI, "delete", name], env=env, timeout=60)


def _on_a_terminal(command: list[str], env: dict[str, str]) -> bool:
    """Run ``command`` with a pseudo-terminal as stdout and stderr; whether a bar was drawn."""
    import os
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
        env={**env, "TERM": "xterm", "COLUMNS": "100"},
    )  # fmt: skip
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal closed
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0, output
    return b"publishing" in output
