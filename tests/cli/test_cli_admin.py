"""create, delete, pause, readonly, metadata, cursor and the error contract, end to end."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from liftbridge_sync import Client
from tests.cli.conftest import CLI, Run, cli_env
from tests.integration.conftest import unique
from tests.waiting import wait_until

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


def test_metadata_of_a_missing_stream_prints_nothing_and_exits_3(run: Run, stream: str) -> None:
    """``metadata MISSING`` printed the brokers table and an empty streams table (or a
    JSON record without the stream), which read as an answer, then exited 3."""
    missing, other = unique("cli-missing"), unique("cli-missing")
    for args in (
        (missing,),
        (missing, "--json"),
        (stream, missing, other, "--json"),
        (stream, missing, other),
    ):
        result = run("metadata", *args)
        assert (result.returncode, result.stdout) == (3, ""), (args, result)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert result.stderr.startswith("liftbridge-sync: error: no such stream"), result.stderr
        assert missing in result.stderr and stream not in result.stderr
        assert (other in result.stderr) == (other in args), result.stderr


def test_piped_metadata_keeps_long_names_whole(run: Run, liftbridge_client: Client) -> None:
    name = unique("cli-" + "very-long-stream-name-" * 4)
    subject = f"{name}.subject." + "deep." * 20 + "end"
    liftbridge_client.create_stream(subject, name)
    try:
        table = run("metadata", name)
        assert table.returncode == 0, table.stderr
        assert "…" not in table.stdout
        row = next(line for line in table.stdout.splitlines() if name in line)
        assert f" {subject} " in row  # the whole subject on the same row
    finally:
        liftbridge_client.delete_stream(name)


@pytest.mark.parametrize("shape", ["[/x]", "[bold]b", ":fire:"])
def test_metadata_prints_names_that_look_like_markup_as_they_are(
    run: Run, liftbridge_client: Client, shape: str
) -> None:
    """Names are the server's data: Rich must neither style them, turn them into
    emoji, nor fail on them (a closing tag alone, "[/x]", made Rich raise)."""
    name = unique("cli-markup") + shape.replace("/", "")  # no '/' in stream names
    subject = name + "-subject" + shape
    liftbridge_client.create_stream(subject, name)
    try:
        table = run("metadata", name)
        assert table.returncode == 0, table.stderr
        assert f" {name} " in table.stdout and f" {subject} " in table.stdout
    finally:
        liftbridge_client.delete_stream(name)


def test_pause_and_readonly(run: Run, stream: str, liftbridge_client: Client) -> None:
    paused = run("pause", stream, "-P", "1")
    assert paused.returncode == 0 and paused.stderr.strip() == f"paused stream {stream} partition 1"
    partitions = liftbridge_client.fetch_metadata(stream).streams[stream].partitions
    assert (partitions[0].paused, partitions[1].paused) == (False, True)
    shown = json.loads(run("metadata", stream, "--json").stdout)["streams"][stream]
    assert [shown["partitions"][p]["paused"] for p in ("0", "1")] == [False, True]
    # A publish resumes partition 1. v1.9.0 goes on saying paused; the command does not.
    assert run("publish", stream, "wakes", "-P", "1").returncode == 0
    assert liftbridge_client.fetch_metadata(stream).streams[stream].partitions[1].paused
    shown = json.loads(run("metadata", stream, "--json").stdout)["streams"][stream]
    assert not shown["partitions"]["1"]["paused"]
    assert "paused" not in run("metadata", stream).stdout

    one = run("readonly", stream, "-P", "0")
    assert one.returncode == 0 and one.stderr.strip() == f"stream {stream} partition 0 is read-only"
    whole = run("readonly", stream)
    assert whole.returncode == 0 and whole.stderr.strip() == f"stream {stream} is read-only"
    refused = run("publish", stream, "x")
    assert refused.returncode == 6, refused.stderr
    assert refused.stderr.startswith("liftbridge-sync: error: 1 of 1 messages failed")
    assert "Traceback" not in refused.stderr

    assert run("readonly", stream, "--off").returncode == 0
    published = run("publish", stream, "x")
    assert published.returncode == 0
    assert published.stderr.strip() == f"published 1 message to {stream}"
    assert liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset == 0


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("pause", "{stream}", "-P", "-1"), "--partition"),
        (("readonly", "{stream}", "-P", "-2"), "--partition"),
        (("readonly", "{stream}", "--off", "-P", "-1"), "--partition"),
        (("create", "{stream}-new", "-r", "0"), "--replication-factor"),
        (("create", "{stream}-new", "-r", "-2"), "--replication-factor"),
        # Too large for the wire, or for what the server holds.
        (("create", "{stream}-new", "-p", "10001"), "--partitions"),
        (("create", "{stream}-new", "-r", "2147483648"), "--replication-factor"),
        (
            ("create", "{stream}-new", "--retention-max-messages", "9223372036854775808"),
            "--retention-max-messages",
        ),
        (
            ("create", "{stream}-new", "--retention-max-bytes", "9223372036854775808"),
            "--retention-max-bytes",
        ),
        (("create", "{stream}-new", "--retention-max-age", "nan"), "--retention-max-age"),
        (("create", "{stream}-new", "--retention-max-age", "1e300"), "--retention-max-age"),
        (("create", "{stream}-new", "--retention-max-age", "0.0001"), "--retention-max-age"),
        (("create", "{stream}-new", "--subject", ""), "--subject"),
        (("create", "{stream}-new", "--group", ""), "--group"),
        (("publish", "{stream}", "a:b", "-K", ""), "--key-separator"),
        (("pause", "{stream}", "-P", "2147483648"), "--partition"),
        (("readonly", "{stream}", "-P", "2147483648"), "--partition"),
        (("cursor", "get", "{stream}", "c", "-P", "2147483648"), "--partition"),
        (("cursor", "set", "{stream}", "c", "5", "-P", "2147483648"), "--partition"),
        (("cursor", "set", "{stream}", "c", "9223372036854775808"), "OFFSET"),
        (("cursor", "set", "{stream}", "", "5"), "CURSOR_ID"),
        (("cursor", "get", "{stream}", ""), "CURSOR_ID"),
        (("publish", "{stream}", "x", "-P", "2147483648"), "--partition"),
        (("subscribe", "{stream}", "-P", "2147483648"), "--partition"),
        # Empty values meant the default (the earliest, the latest, a temporary stream),
        # or printed nothing at all (an empty --format).
        (("subscribe", "{stream}", "--start", ""), "--start"),
        (("subscribe", "{stream}", "--stop", " "), "--stop"),
        (("subscribe", "{stream}", "-f", ""), "--format"),
        (("bench", "--stream", ""), "--stream"),
        # The largest size advertised was over the server's request limit with the
        # request's other fields: exit 2 after all.
        (("bench", "--size", str(4 * 1024 * 1024 - 1023)), "--size"),
    ],
)
def test_an_option_out_of_range_is_a_usage_error_naming_the_option(
    run: Run, stream: str, args: tuple[str, ...], option: str
) -> None:
    """They failed in the client's terms ('partitions' must be between 0 and ...,
    'cursor_id' must be a non-empty str or None), or an empty --subject or -K was taken
    for none (the stream's name, an unkeyed line)."""
    result = run(*(arg.format(stream=stream) for arg in args))
    assert result.returncode == 2, result.stderr
    assert "Invalid value for" in result.stderr and option in result.stderr, result.stderr
    assert not re.search(r"'[a-z]+_[a-z_]+'|'partitions?'|None", result.stderr), result.stderr


@pytest.mark.parametrize(
    ("args", "redirect", "code", "error"),
    [
        (("subscribe", "{stream}"), ">&-", 1, "standard output is closed"),
        (("cursor", "get", "{stream}", "c"), ">&-", 1, "standard output is closed"),
        (("publish", "{stream}", "x", "--print-acks"), ">&-", 1, "standard output is closed"),
        (("metadata",), ">&-", 1, "standard output is closed"),
        (("publish", "{stream}"), "<&-", 2, "standard input is closed"),
        (("publish", "{stream}", "x"), ">&- <&-", 0, None),  # needs neither
        (("create", "{stream}", "--exist-ok"), ">&- <&-", 0, None),
    ],
)
def test_a_closed_standard_input_or_output_is_one_line_not_a_traceback(
    liftbridge_address: str,
    stream: str,
    liftbridge_client: Client,
    args: tuple[str, ...],
    redirect: str,
    code: int,
    error: str | None,
) -> None:
    """Python makes a closed stdin or stdout None: every command failed with an
    AttributeError traceback, even one that prints nothing on stdout."""
    command = shlex.join([*CLI, *(arg.format(stream=stream) for arg in args)])
    result = subprocess.run(
        ["bash", "-c", f"{command} {redirect}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(liftbridge_address),
        timeout=60,
    )
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    if error is not None:
        [line] = result.stderr.splitlines()
        assert line.startswith(f"liftbridge-sync: error: {error}"), result.stderr
        # Refused before anything was sent.
        assert liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset == -1


def test_publish_that_stops_at_a_failure_says_the_rest_of_the_input_was_not_read(
    run: Run, liftbridge_client: Client, tmp_path: Path
) -> None:
    """Publishing stops reading input at the first failure it sees. The error said only
    "1025 of 1025 messages failed" for a 3000-line file: the 1975 lines never read (nor
    published) were not mentioned, as if the input had ended there."""
    name = unique("cli-ro")
    liftbridge_client.create_stream(name, name)
    try:
        liftbridge_client.set_stream_readonly(name)
        source = tmp_path / "lines.txt"
        source.write_bytes(b"".join(b"%d\n" % i for i in range(3000)))
        result = run("publish", name, "-f", str(source))
        assert result.returncode == 6, result.stderr
        assert "Traceback" not in result.stderr
        # At most max_in_flight (1024) publishes wait for their acks: the first failure
        # is seen before the 1026th line is read.
        match = re.search(r"(\d+) of (\d+) messages failed", result.stderr)
        assert match is not None, result.stderr
        read = int(match.group(2))
        assert int(match.group(1)) == read < 3000
        assert f"input after message {read} was not read" in result.stderr
    finally:
        liftbridge_client.delete_stream(name)


def test_a_start_offset_after_the_stop_offset_is_a_usage_error(
    run: Run, stream: str, liftbridge_client: Client
) -> None:
    """It read nothing and exited 0, as the library's empty range does."""
    for i in range(3):
        liftbridge_client.publish(stream, f"m{i}".encode(), partition=0)
    result = run("subscribe", stream, "-P", "0", "-s", "offset:5", "-e", "offset:2")
    assert result.returncode == 2, result.stderr
    assert "--start offset 5 is after --stop offset 2" in result.stderr
    same = run("subscribe", stream, "-P", "0", "-s", "offset:2", "-e", "offset:2")
    assert (same.returncode, same.stdout) == (0, "m2\n"), same.stderr  # a valid range


def test_cursor_set_and_get(run: Run, stream: str, liftbridge_client: Client) -> None:
    assert run("cursor", "get", stream, "billing").stdout.strip() == "-1"
    assert run("cursor", "set", stream, "billing", "41", "-P", "1").returncode == 0
    assert liftbridge_client.fetch_cursor("billing", stream, 1) == 41
    got = run("cursor", "get", stream, "billing", "--partition", "1")
    assert (got.returncode, got.stdout.strip()) == (0, "41")
    # -1, the smallest OFFSET (no cursor), was "No such option: -1" without a "--".
    reset = run("cursor", "set", stream, "billing", "-1", "-P", "1")
    assert reset.returncode == 0, reset.stderr
    assert liftbridge_client.fetch_cursor("billing", stream, 1) == -1


def test_a_cursor_past_the_end_says_where_the_read_began_instead(
    run: Run, stream: str, liftbridge_client: Client
) -> None:
    """The library reads from the earliest offset when a cursor is past the newest (a
    stream deleted and created again): the command printed every message without a
    word, the WARNING saying so seen only under --debug."""
    for i in range(3):
        liftbridge_client.publish(stream, f"m{i}".encode(), partition=0)
    assert run("cursor", "set", stream, "far", "99999").returncode == 0
    read = run("subscribe", stream, "-P", "0", "-s", "cursor:far")
    assert read.returncode == 0 and read.stdout.splitlines() == ["m0", "m1", "m2"]
    (warning,) = read.stderr.splitlines()
    assert warning.startswith("liftbridge-sync: warning: ") and "past the partition's newest" in (
        warning
    ), read.stderr
    quiet = run("subscribe", stream, "-P", "0")  # nothing to warn about: nothing said
    assert quiet.stderr == ""


def test_text_printed_into_a_closed_pipe_is_exit_141_without_a_word(
    liftbridge_address: str, stream: str
) -> None:
    # What click prints itself (help, version) and what a command prints with click.echo
    # (cursor get): click turned the EPIPE into a bare exit 1, nothing on stderr.
    for args in (("cursor", "get", stream, "billing"), ("--help",), ("publish", "--help")):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before anything is written
        try:
            result = subprocess.run(
                [*CLI, *args],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                env=cli_env(liftbridge_address),
                timeout=60,
            )
        finally:
            os.close(write_end)
        assert (result.returncode, result.stderr) == (141, ""), (args, result)


def test_cursor_of_a_missing_stream_or_partition_is_exit_3(run: Run, stream: str) -> None:
    missing = unique("cli-missing")
    for args in (
        ("cursor", "get", missing, "billing"),
        ("cursor", "set", missing, "billing", "5"),
        ("cursor", "get", stream, "billing", "-P", "99"),
        ("cursor", "set", stream, "billing", "5", "-P", "99"),
    ):
        result = run(*args)
        assert result.returncode == 3, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert "no such" in result.stderr, result.stderr


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
    # --debug adds the traceback; the exit code stays the documented one.
    assert debug.returncode == 5 and "Traceback" in debug.stderr
    assert "BrokerUnavailableError" in debug.stderr
    assert debug.stderr.rstrip().splitlines()[-1].startswith("liftbridge-sync: error: ")

    empty = subprocess.run(
        [*CLI, "-a", "", "metadata"], capture_output=True, text=True, env=env, timeout=60
    )
    assert empty.returncode == 2 and "no broker address" in empty.stderr, empty.stderr

    bad = subprocess.run(
        [*CLI, "-a", "no-port", "metadata"], capture_output=True, text=True, env=env, timeout=60
    )
    assert bad.returncode == 2 and "host:port" in bad.stderr
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("liftbridge-sync: error: ")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("metadata",), "--timeout 3s"),
        (("cursor", "get", "s", "c"), "--timeout 3s"),
        (("publish", "s", "x"), "no broker reachable"),
        (("publish", "s", "x", "--ack-policy", "none"), "--timeout 3s"),
    ],
)
def test_an_unavailable_broker_is_retried_until_the_timeout(
    liftbridge_address: str, args: tuple[str, ...], says: str
) -> None:
    """--timeout 3 with a refused port failed in under a second: the command's retry
    policy gave up after 3 attempts whatever --timeout said (a broker restarting in that
    time was never reached). It retries until --timeout has passed, then exits 5, and a
    publish's ack wait does not run out first (that was exit 6, "no ack")."""
    started = time.monotonic()
    refused = subprocess.run(
        [*CLI, "-a", "127.0.0.1:1", "--timeout", "3", *args],
        capture_output=True,
        text=True,
        env=cli_env(liftbridge_address),
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert refused.returncode == 5, refused.stderr
    assert says in refused.stderr and "127.0.0.1:1" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    # The last attempt starts at most one back-off (0.5 s) before the 3 s are up.
    assert 2.4 <= elapsed < 30, elapsed


@pytest.mark.parametrize("value", ["", "  ", ","])
def test_an_empty_addresses_variable_is_a_usage_error_not_localhost(
    liftbridge_address: str, value: str
) -> None:
    """click takes an empty (or blank) environment variable for an unset one: an
    ``export LIFTBRIDGE_ADDRESSES=$UNSET_VAR`` sent the command to localhost:9292 (exit 5
    there, or whatever broker listens on it) where an empty -a is exit 2."""
    env = cli_env(liftbridge_address)
    env["LIFTBRIDGE_ADDRESSES"] = value
    result = subprocess.run(
        [*CLI, "--timeout", "1", "metadata"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "LIFTBRIDGE_ADDRESSES" in result.stderr and "localhost" not in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    # An -a still wins over the variable, empty or not.
    given = subprocess.run(
        [*CLI, "-a", liftbridge_address, "metadata", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert given.returncode == 0, given.stderr


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


_INTERRUPT_ON_IMPORT = """
import os, runpy, signal, sys

TARGET, ARGV = sys.argv[1], sys.argv[2:]

class InterruptOn:
    # Ctrl-C arrives while the module is being imported: a real SIGINT, which Python's
    # handler turns into KeyboardInterrupt at the import's next bytecode.
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptOn())
sys.argv[1:] = ARGV
runpy.run_module("liftbridge_sync", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("liftbridge_sync.cli", ["--help"]),
        ("click", ["--help"]),
        ("liftbridge_sync.models", ["--help"]),
        # rich loads when a command draws its tables, no longer at start
        ("rich.console", ["metadata"]),
    ],
)
def test_ctrl_c_while_the_command_line_loads_is_exit_130_without_a_traceback(
    liftbridge_address: str, module: str, argv: list[str]
) -> None:
    """Ctrl-C while the command line was importing its commands, click or rich (a tenth
    of a second of every start) printed a KeyboardInterrupt traceback."""
    result = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_ON_IMPORT, module, *argv],
        capture_output=True,
        text=True,
        env=cli_env(liftbridge_address),
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (130, ""), result
    # During a command, click's Ctrl-C handling ends the current line first.
    stderr = result.stderr.lstrip("\n") if argv != ["--help"] else result.stderr
    assert stderr == "liftbridge-sync: interrupted\n", result.stderr


def test_bench(run: Run) -> None:
    result = run("bench", "--count", "300", "--size", "64", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["received"] == record["messages"] == 300
    assert record["publish_per_second"] > 0


def test_bench_with_a_size_no_message_can_have_is_a_usage_error(run: Run) -> None:
    """``--size`` had no upper bound: the payload was built before anything else, so a
    size beyond memory ended in a MemoryError traceback (exit 1)."""
    result = run("bench", "--count", "1", "--size", str(10**14))
    assert result.returncode == 2, result.stderr
    assert "--size" in result.stderr and "Traceback" not in result.stderr


def test_bench_says_why_its_publishes_failed(run: Run) -> None:
    """A message the server refuses (over NATS's 1 MiB payload limit) failed every
    publish with "2 of 2 publishes failed" and no word of the cause."""
    result = run("bench", "--count", "2", "--size", "2000000")
    assert result.returncode == 6, result.stderr
    assert "2 of 2 publishes failed; the first with " in result.stderr, result.stderr
    assert "Error: " in result.stderr.split("the first with ", 1)[1], result.stderr


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


def test_the_served_export_line_is_what_the_command_line_reads() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "liftbridge_sync.testing", "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as serve:
        try:
            assert serve.stdout is not None
            export = ""
            for line in serve.stdout:  # ends when serve exits; bounded by the test timeout
                if line.strip().startswith("export "):
                    export = line.strip()
                    break
            assert export, "serve printed no export line"
            exported = dict(item.split("=", 1) for item in export.split()[1:])
            assert "LIFTBRIDGE_ADDRESSES" in exported
            env = {k: v for k, v in os.environ.items() if not k.startswith("LIFTBRIDGE_")}
            env.update(exported)
            meta = subprocess.run(
                [*CLI, "metadata", "--json"], capture_output=True, text=True, env=env, timeout=60
            )
            assert meta.returncode == 0, meta.stderr
            address = exported["LIFTBRIDGE_ADDRESSES"]
            assert [b["address"] for b in json.loads(meta.stdout)["brokers"]] == [address]
        finally:
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=60)


_FAKE_GO = """#!/bin/sh
# A `go` whose build never ends: notes each run (and its pid), then waits.
echo "$$ $*" >> "$FAKE_GO_LOG"
exec sleep 300
"""


@pytest.mark.parametrize(
    ("command", "signum", "code", "group"),
    [
        ("serve", signal.SIGINT, 130, False),  # kill -INT of the Python process only
        ("serve", signal.SIGINT, 130, True),  # Ctrl-C in a terminal: go is signalled too
        ("serve", signal.SIGTERM, 143, False),
        ("install", signal.SIGINT, 130, False),
    ],
)
def test_a_signal_during_the_server_build_stops_it_at_once(
    tmp_path: Path, command: str, signum: int, code: int, group: bool
) -> None:
    """serve noted Ctrl-C and SIGTERM for after the build (minutes of `go install`);
    with go signalled as well (a terminal's Ctrl-C) the failed pinned build was followed
    by the v1.9.0 one. install printed a traceback."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "go").write_text(_FAKE_GO)
    (bindir / "go").chmod(0o755)
    log = tmp_path / "go.log"
    log.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFTBRIDGE_")}
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        LIFTBRIDGE_SYNC_CACHE=str(tmp_path / "cache"),  # empty: a build is needed
        FAKE_GO_LOG=str(log),
        PYTHONFAULTHANDLER="1",
    )
    with subprocess.Popen(
        [sys.executable, "-m", "liftbridge_sync.testing", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as process:
        try:
            wait_until(
                lambda: process.poll() is not None or log.read_text().endswith("\n"),
                timeout=60,
                what="the fake go to run",
            )
            assert process.poll() is None, process.communicate(timeout=30)
            if group:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)
            try:
                _, err = process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGABRT)
                _, err = process.communicate(timeout=30)
                pytest.fail(f"the build went on after the signal:\n{err[-4000:]}")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("interrupted" if code == 130 else "terminated")
    runs = log.read_text().splitlines()
    assert len(runs) == 1 and " install " in f" {runs[0]} ", runs  # no fallback build
    fake_go = int(runs[0].split()[0])
    assert not Path(f"/proc/{fake_go}").exists() or _zombie(fake_go), "go left running"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
