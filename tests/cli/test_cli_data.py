"""publish and subscribe end to end, including shell pipes and follow mode."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import select
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from liftbridge_sync import Client, StartAt, StopAt
from liftbridge_sync.testing import FakeBroker
from tests.cli.conftest import CLI, Run, cli_env
from tests.integration.conftest import unique
from tests.waiting import interrupt, wait_until

pytestmark = pytest.mark.integration


def _ends_within(process: subprocess.Popen[Any], seconds: float, failure: str) -> None:
    """Wait for the command to end; fail with ``failure`` if it still runs ``seconds``
    later (the caller's ``finally`` kills it)."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(failure)


def _signal_and_wait(process: subprocess.Popen[Any], signum: int, what: str) -> None:
    """Send ``signum``; fail (after a SIGABRT for its traceback) if the command is
    still running 30 s later."""
    process.send_signal(signum)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        process.wait(timeout=30)
        pytest.fail(f"still running 30 s after {what}")


def _read_all(client: Client, stream: str, partition: int = 0) -> list[tuple[bytes | None, bytes]]:
    with client.subscribe(
        stream, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
    ) as sub:
        return [(m.key, m.value) for m in sub]


def test_publish_arguments_with_key_headers_and_acks(
    run: Run, stream: str, liftbridge_client: Client
) -> None:
    result = run(
        "publish",
        stream,
        "one",
        "two",
        "-k",
        "k1",
        "-H",
        "trace=abc",
        "-H",
        "n=1",
        "-P",
        "1",
        "--ack-policy",
        "all",
        "--print-acks",
    )
    assert result.returncode == 0, result.stderr
    acks = [json.loads(line) for line in result.stdout.splitlines()]
    assert acks == [
        {"stream": stream, "partition": 1, "offset": 0},
        {"stream": stream, "partition": 1, "offset": 1},
    ]
    out = run("subscribe", stream, "-P", "1", "-o", "json")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (0, "k1", "one"),
        (1, "k1", "two"),
    ]
    assert records[0]["headers"]["trace"] == "abc" and records[0]["headers"]["n"] == "1"


def test_publish_arguments_that_are_not_utf8_go_out_as_the_bytes_given(
    run: Run, stream: str, liftbridge_client: Client
) -> None:
    """Python decodes such arguments with surrogate escapes; encoding them back as
    UTF-8 raised a traceback. A header *name* must be text, and says so."""
    value, key = os.fsdecode(b"\xffv"), os.fsdecode(b"k\xfe")
    result = run("publish", stream, value, "-k", key, "-H", "h=" + os.fsdecode(b"\xfd"))
    assert result.returncode == 0, result.stderr
    with liftbridge_client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
        [message] = list(sub)
    assert (message.key, message.value, message.headers["h"]) == (b"k\xfe", b"\xffv", b"\xfd")
    bad_name = run("publish", stream, "x", "-H", os.fsdecode(b"\xfe") + "=1")
    assert bad_name.returncode == 2 and "--header" in bad_name.stderr
    assert "Traceback" not in bad_name.stderr


def test_a_line_without_a_key_separator_that_is_not_utf8_is_one_line_and_exit_2(
    run: Run, stream: str, liftbridge_client: Client, tmp_path: Path
) -> None:
    """The refusal decoded the separator as strict UTF-8 for its message, so a
    separator such as ``-K $'\\xff'`` turned it into a UnicodeDecodeError traceback
    (exit 1) instead of the usage error."""
    source = tmp_path / "lines.txt"
    source.write_bytes(b"a\xffb\nno-key\n")
    separator = os.fsdecode(b"\xff")
    result = run("publish", stream, "-P", "0", "-K", separator, "-f", str(source))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "line 2 has no key separator" in result.stderr
    assert "(1 earlier message(s) published)" in result.stderr
    assert _read_all(liftbridge_client, stream, 0) == [(b"a", b"b")]


def test_a_value_argument_without_the_key_separator_is_refused_before_any_is_sent(
    run: Run, stream: str, liftbridge_client: Client
) -> None:
    """With ``-K``, VALUES without the separator were published without a key, where a
    line of a file is refused unless ``--allow-unkeyed``."""
    refused = run("publish", stream, "-P", "0", "-K", ":", "k1:v1", "v2")
    assert refused.returncode == 2, refused.stderr
    assert "VALUE 2 has no key separator" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert _read_all(liftbridge_client, stream, 0) == []  # nothing went out
    allowed = run("publish", stream, "-P", "0", "-K", ":", "k1:v1", "v2", "--allow-unkeyed")
    assert allowed.returncode == 0, allowed.stderr
    assert _read_all(liftbridge_client, stream, 0) == [(b"k1", b"v1"), (None, b"v2")]


@pytest.mark.parametrize("timeout", ["nan", "inf", "1e10", "0"])
def test_a_bad_timeout_is_a_usage_error_naming_the_timeout(run: Run, timeout: str) -> None:
    result = run("--timeout", timeout, "metadata")
    assert result.returncode == 2
    assert "--timeout" in result.stderr and "--address" not in result.stderr


def test_publish_from_a_shell_pipe_and_a_file(
    liftbridge_address: str, run: Run, stream: str, liftbridge_client: Client, tmp_path: Path
) -> None:
    command = f"seq 1 500 | {shlex.join(CLI)} publish {stream} --partitioner round-robin"
    piped = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True,
        text=True,
        env=cli_env(liftbridge_address),
        timeout=60,
    )
    assert piped.returncode == 0, piped.stderr
    values = sorted(int(v) for p in (0, 1) for _, v in _read_all(liftbridge_client, stream, p))
    assert values == list(range(1, 501))
    assert len(_read_all(liftbridge_client, stream, 1)) == 250

    source = tmp_path / "data.txt"
    source.write_bytes(b"a:1\nb:2\nno-key\n\xff\xfe:binary\n")
    refused = run("publish", stream, "-f", str(source), "-K", ":", "--partitioner", "key")
    assert refused.returncode == 2, refused.stderr
    assert "line 3 has no key separator" in refused.stderr
    assert "(2 earlier message(s) published)" in refused.stderr
    from_file = run(
        "publish", stream, "-f", str(source), "-K", ":", "--partitioner", "key", "--allow-unkeyed"
    )
    assert from_file.returncode == 0, from_file.stderr
    everything = [m for p in (0, 1) for m in _read_all(liftbridge_client, stream, p)]
    assert {(b"a", b"1"), (b"b", b"2"), (None, b"no-key"), (b"\xff\xfe", b"binary")} <= set(
        everything
    )
    absent = run("publish", stream, "-f", str(tmp_path / "absent.txt"))
    assert absent.returncode == 2 and "Traceback" not in absent.stderr


def test_a_line_too_large_to_publish_stops_publishing_as_a_failed_publish_does(
    run: Run, stream: str, liftbridge_client: Client, tmp_path: Path
) -> None:
    """The client refuses a message over the server's 4 MiB before sending it, raising
    from publish_async: that ended the command with exit 2 and only the size error, not
    saying the line before it had gone out nor that the lines after it were not read."""
    source = tmp_path / "lines.txt"
    source.write_bytes(b"first\n" + b"x" * (5 * 1024 * 1024) + b"\nlast\n")
    result = run("publish", stream, "-P", "0", "-f", str(source))
    assert result.returncode == 6, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "1 of 2 messages failed" in result.stderr, result.stderr
    assert "input after message 2 was not read" in result.stderr
    assert "4,194,304" in result.stderr  # the size error itself
    assert _read_all(liftbridge_client, stream) == [(None, b"first")]


def test_publish_without_acks_to_a_target_that_would_drop_it_is_refused_before_sending(
    run: Run, stream: str, liftbridge_client: Client
) -> None:
    """With --ack-policy none nothing waits for the broker's answer: a missing stream or
    partition, or a read-only partition, lost every message while the command said
    "published 1 message" and exited 0."""
    missing = unique("cli-missing")
    for args, code, said in (
        ((missing, "x"), 3, "no such stream"),
        ((stream, "x", "-P", "5"), 3, "no such partition"),
        ((missing, "x", "--partitioner", "key", "-k", "k"), 3, "no such stream"),
    ):
        result = run("publish", *args, "--ack-policy", "none")
        assert result.returncode == code, (args, result.stderr)
        assert said in result.stderr and result.stderr.count("\n") == 1, result.stderr
    liftbridge_client.set_stream_readonly(stream, partitions=[1])
    for args in (("-P", "1"), ("--partitioner", "round-robin")):
        refused = run("publish", stream, "x", *args, "--ack-policy", "none")
        assert refused.returncode == 6, (args, refused.stderr)
        assert "read-only" in refused.stderr and "partition 1" in refused.stderr
    assert [
        liftbridge_client.fetch_partition_metadata(stream, p).newest_offset for p in (0, 1)
    ] == [
        -1,
        -1,
    ]
    sent = run("publish", stream, "x", "--ack-policy", "none")
    assert sent.returncode == 0, sent.stderr
    assert (
        sent.stderr.strip() == f"sent 1 message to {stream} (--ack-policy none: not acknowledged)"
    )
    assert _read_all(liftbridge_client, stream) == [(None, b"x")]


def test_subscribe_positions_and_formats(run: Run, stream: str, liftbridge_client: Client) -> None:
    for i in range(6):
        liftbridge_client.publish(stream, f"m{i}".encode(), partition=0)
    liftbridge_client.publish(stream, b"\x00\xffbin", partition=0)
    window = run("subscribe", stream, "-P", "0", "--start", "offset:2", "--stop", "offset:4")
    assert window.stdout.splitlines() == ["m2", "m3", "m4"]
    counted = run("subscribe", stream, "-P", "0", "-n", "2")
    assert counted.stdout.splitlines() == ["m0", "m1"]
    binary = run("subscribe", stream, "-P", "0", "-s", "offset:6", "-o", "json")
    record = json.loads(binary.stdout)
    assert record["value_base64"] is True and record["offset"] == 6
    empty = run("subscribe", stream, "-P", "1")  # nothing yet: ends at once
    assert (empty.returncode, empty.stdout) == (0, "")
    both = run("subscribe", stream)  # every partition, to the latest
    assert both.returncode == 0 and len(both.stdout.splitlines()) == 7
    bad = run("subscribe", stream, "--start", "yesterday")
    assert bad.returncode == 2 and "unknown start position" in bad.stderr
    unknown = run("subscribe", stream + "-absent")
    assert unknown.returncode == 3 and "Traceback" not in unknown.stderr


def test_a_stop_offset_past_the_newest_waits_for_it_then_ends(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    """``--stop offset:N`` past the newest offset (as its help now says) waits for N to
    be written, then prints the range and exits 0."""
    for value in (b"a", b"b"):
        liftbridge_client.publish(stream, value, partition=0)
    with subprocess.Popen(
        [*CLI, "subscribe", stream, "-P", "0", "--stop", "offset:3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(liftbridge_address),
    ) as process:
        try:
            # Offsets 2 and 3 are not written: the command must not end (3 s to show it).
            with pytest.raises(subprocess.TimeoutExpired):
                process.wait(timeout=3)
            for value in (b"c", b"d"):
                liftbridge_client.publish(stream, value, partition=0)
            out, err = process.communicate(timeout=30)
        finally:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 0, err.decode(errors="replace")
    assert out == b"a\nb\nc\nd\n"


def test_line_endings_empty_lines_templates_and_the_last_n(
    run: Run, stream: str, liftbridge_client: Client, tmp_path: Path
) -> None:
    source = tmp_path / "windows.txt"
    source.write_bytes(b"one\r\n\r\ntwo\r\n\nthree")
    kept = run("publish", stream, "-P", "0", "-f", str(source))
    assert kept.returncode == 0, kept.stderr
    assert [v for _, v in _read_all(liftbridge_client, stream, 0)] == [
        b"one",
        b"",
        b"two",
        b"",
        b"three",
    ]
    skipped = run("publish", stream, "-P", "1", "-f", str(source), "--skip-empty", "-k", "K")
    assert skipped.returncode == 0, skipped.stderr
    assert _read_all(liftbridge_client, stream, 1) == [
        (b"K", b"one"),
        (b"K", b"two"),
        (b"K", b"three"),
    ]

    shown = run("subscribe", stream, "-P", "1", "-f", "%t/%p@%o %k=%s %S%%\\n")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"{stream}/1@0 K=one 3%",
        f"{stream}/1@1 K=two 3%",
        f"{stream}/1@2 K=three 5%",
    ]
    bad = run("subscribe", stream, "-f", "%q")
    assert bad.returncode == 2 and "unknown field %q" in bad.stderr

    last_two = run("subscribe", stream, "-P", "0", "--last", "2")
    assert last_two.stdout.splitlines() == ["", "three"]
    # Every partition, one after another; the same as --start last:N.
    both = run("subscribe", stream, "--start", "last:1", "-f", "%p:%s\\n")
    assert both.returncode == 0, both.stderr
    assert both.stdout.splitlines() == ["0:three", "1:three"]
    more_than_there = run("subscribe", stream, "-P", "1", "--last", "100")
    assert more_than_there.stdout.splitlines() == ["one", "two", "three"]
    follow_all = run("subscribe", stream, "--last", "1", "--follow")
    assert follow_all.returncode == 2 and "-P" in follow_all.stderr


def test_raw_output_is_the_bytes(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    liftbridge_client.publish(stream, b"\x00\x01", partition=0)
    liftbridge_client.publish(stream, b"\xff", partition=0)
    raw = subprocess.run(
        [*CLI, "subscribe", stream, "-P", "0", "-o", "raw"],
        capture_output=True,
        env=cli_env(liftbridge_address),
        timeout=60,
    )
    assert raw.returncode == 0 and raw.stdout == b"\x00\x01\xff"


def test_subscribe_into_head_has_no_broken_pipe_traceback(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    big = b"y" * 1024
    futures = [liftbridge_client.publish_async(stream, big, partition=0) for _ in range(400)]
    for future in futures:
        future.result()
    command = f"{shlex.join(CLI)} subscribe {stream} -P 0 | head -n 2"
    result = subprocess.run(
        ["bash", "-c", f'{command}; echo "status=${{PIPESTATUS[0]}}" >&2'],
        capture_output=True,
        text=True,
        env=cli_env(liftbridge_address),
        timeout=60,
    )
    assert result.stdout.splitlines() == [big.decode()] * 2
    assert result.stderr.strip() == "status=141", result.stderr


def test_printed_acks_into_head_say_how_far_publishing_got(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    command = f"seq 1 20000 | {shlex.join(CLI)} publish {stream} -P 0 --print-acks | head -n 1"
    result = subprocess.run(
        ["bash", "-c", f'{command}; echo "status=${{PIPESTATUS[1]}}" >&2'],
        capture_output=True,
        text=True,
        env=cli_env(liftbridge_address),
        timeout=120,
    )
    assert len(result.stdout.splitlines()) == 1
    *summary, status = result.stderr.strip().splitlines()
    assert status == "status=141", result.stderr
    assert len(summary) == 1 and "output closed" in summary[0], result.stderr
    match = re.search(r"after (\d+) messages?; (\d+) published, (\d+) failed", summary[0])
    assert match is not None, summary
    sent, published, failed = map(int, match.groups())
    assert failed == 0 and published == sent
    # What the summary says was published is exactly what the partition holds.
    newest = liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset
    assert newest + 1 == published


def test_printed_acks_come_as_they_arrive_and_ctrl_c_prints_those_received(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    """``tail -f log | publish --print-acks``: each ack was printed only when the next
    line came, and Ctrl-C, which the kernel may give to one of the client's threads,
    left the command blocked reading the still open input, then dropped its acks."""
    with subprocess.Popen(
        [*CLI, "publish", stream, "-P", "0", "--print-acks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(liftbridge_address),
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        printed: queue.Queue[bytes] = queue.Queue()

        def read() -> None:
            for printed_line in process.stdout or []:
                printed.put(printed_line)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for i in range(3):
                process.stdin.write(f"m{i}\n".encode())
                process.stdin.flush()
                # The pipe stays open: the ack must come without another line or EOF.
                line = printed.get(timeout=30)
                assert json.loads(line) == {"stream": stream, "partition": 0, "offset": i}
            process.stdin.write(b"".join(f"burst-{i}\n".encode() for i in range(200)))
            process.stdin.flush()
            _signal_and_wait(process, signal.SIGINT, "SIGINT with its input open")
        finally:
            process.kill()
            process.wait(timeout=30)
            reader.join(timeout=30)
        err = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
    assert process.returncode == 130, err
    assert "Traceback" not in err
    offsets = [json.loads(line)["offset"] for line in list(printed.queue)]
    # Every message the partition holds was acked, and its ack printed, in order.
    stored = liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset + 1
    assert offsets == list(range(3, stored))
    last = err.strip().splitlines()[-1]
    assert (
        last
        == f"liftbridge-sync: interrupted: {stored} messages read, {stored} published, 0 failed"
    )


def test_a_failed_publish_ends_the_wait_for_the_next_input_line(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    """The failure was seen only when the next line was read: with input that stays
    open (``tail -f``) the command kept waiting, the failure unreported."""
    with subprocess.Popen(
        [*CLI, "publish", stream, "-P", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=cli_env(liftbridge_address),
        bufsize=0,
    ) as process:
        assert process.stdin is not None
        try:
            process.stdin.write(b"kept\n")
            wait_until(
                lambda: liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset == 0,
                timeout=30,
                what="the first line published",
            )
            liftbridge_client.set_stream_readonly(stream, partitions=[0])
            process.stdin.write(b"refused\n")  # and no more: the pipe stays open
            _ends_within(process, 30, "still waiting for input 30 s after a failed publish")
        finally:
            process.kill()
            process.wait(timeout=30)
        err = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
    assert process.returncode == 6, err
    assert "1 of 2 messages failed and input after message 2 was not read" in err, err


def test_acks_reader_gone_ends_the_wait_for_the_next_input_line(
    liftbridge_address: str, stream: str
) -> None:
    """``tail -f log | publish --print-acks | head -n 1``: once an ack cannot be written
    the command stops at once, not when (if ever) another line comes."""
    with subprocess.Popen(
        [*CLI, "publish", stream, "-P", "0", "--print-acks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(liftbridge_address),
        bufsize=0,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(b"one\n")
            readable, _, _ = select.select([process.stdout], [], [], 30)
            assert readable, "no ack within 30 s"
            process.stdout.close()  # the reader goes away after one ack, as head does
            process.stdin.write(b"two\n")  # its ack has nowhere to go; the pipe stays open
            _ends_within(process, 30, "still waiting for input 30 s after its output closed")
        finally:
            process.kill()
            process.wait(timeout=30)
        err = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
    assert process.returncode == 141, err
    assert "output closed: stopped reading input after 2 messages; 2 published" in err, err


def _publish_until_signalled(address: str, stream: str, signum: int) -> tuple[int, str, list[int]]:
    """Run ``publish --print-acks`` on input that keeps coming, send it ``signum`` once 50
    acks are printed; return its exit code, stderr and the offsets printed after them."""
    with subprocess.Popen(
        [*CLI, "publish", stream, "-P", "0", "--print-acks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(address),
        bufsize=0,  # nothing left to flush into the closed pipe at exit
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        stdin = process.stdin
        printed: queue.Queue[bytes] = queue.Queue()

        def read() -> None:
            for printed_line in process.stdout or []:
                printed.put(printed_line)

        def write() -> None:
            # Far more than is published before the signal; the pipe stays open.
            with contextlib.suppress(OSError):
                for chunk in range(200):
                    stdin.write(b"".join(b"m%d-%d\n" % (chunk, i) for i in range(500)))
                    stdin.flush()

        threads = [threading.Thread(target=read), threading.Thread(target=write, daemon=True)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(50):  # publishing is under way
                printed.get(timeout=30)
            _signal_and_wait(process, signum, "the signal")
        finally:
            process.kill()
            process.wait(timeout=30)
            threads[0].join(timeout=30)
        err = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
    return process.returncode, err, [json.loads(line)["offset"] for line in list(printed.queue)]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_in_the_middle_of_publishing_leaves_no_stored_message_without_its_ack(
    liftbridge_address: str, liftbridge_client: Client, signum: int, code: int
) -> None:
    """Raised wherever the main thread was, KeyboardInterrupt could come out of
    ``publish_async`` after the message was sent and before its future was tracked: the
    message was stored, its ack never printed (a narrow window: a few rounds)."""
    for _ in range(4):
        stream = unique("cli-signal")
        liftbridge_client.create_stream(stream, stream)
        try:
            returncode, err, offsets = _publish_until_signalled(liftbridge_address, stream, signum)
            assert returncode == code, err
            assert "Traceback" not in err
            stored = liftbridge_client.fetch_partition_metadata(stream, 0).newest_offset + 1
            assert stored < 100_000, "the signal came after the input was all published"
            assert offsets == list(range(50, stored)), (len(offsets), stored)
            # How far it got, to take up the input again: all it read is published.
            word = "interrupted" if signum == signal.SIGINT else "terminated"
            last = err.strip().splitlines()[-1]
            assert (
                last
                == f"liftbridge-sync: {word}: {stored} messages read, {stored} published, 0 failed"
            )
        finally:
            liftbridge_client.delete_stream(stream)


def test_ctrl_c_with_acks_that_never_come_exits_within_a_second_not_the_timeout() -> None:
    """Stopped, the command waited for pending acks for the whole --timeout (30 s here)
    before exiting; it now gives them a second and says how many it gave up on."""
    with FakeBroker() as broker:
        # The first publish is acknowledged, the second never is (a hung broker).
        broker.publish_script = lambda request, count: "ack" if count == 1 else "drop"
        with subprocess.Popen(
            [*CLI, "--timeout", "30", "publish", "s", "-P", "0", "--print-acks"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env(broker.address),
            bufsize=0,
        ) as process:
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write(b"acked\nnever\n")
                wait_until(lambda: len(broker.received) == 2, timeout=30, what="two publishes")
                readable, _, _ = select.select([process.stdout], [], [], 30)
                assert readable, "no ack within 30 s"
                process.send_signal(signal.SIGINT)
                started = time.monotonic()
                _ends_within(
                    process, 15, "still waiting 15 s after Ctrl-C for an ack that never comes"
                )
                waited = time.monotonic() - started
            finally:
                process.kill()
                process.wait(timeout=30)
            out = process.stdout.read()
            err = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
    assert process.returncode == 130, err
    assert waited < 10, waited
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [0]
    assert err.strip().splitlines()[-1] == (
        "liftbridge-sync: interrupted: 2 messages read, 1 published, 0 failed, 1 unacknowledged"
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_acks_that_cannot_be_written_are_one_line_and_exit_1(
    liftbridge_address: str, stream: str
) -> None:
    """A full disk under the printed acks: the thread writing them died with a traceback
    and the command said "published" and exited 0."""
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [*CLI, "publish", stream, "-P", "0", "--print-acks"],
            input=b"a\nb\n",
            stdout=full,
            stderr=subprocess.PIPE,
            env=cli_env(liftbridge_address),
            timeout=60,
        )
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 1, err
    [line] = err.splitlines()
    assert line.startswith("liftbridge-sync: error: cannot print the acks: "), err
    assert "No space left on device" in line and "0 failed" in line


def test_print_acks_without_acks_is_a_usage_error(run: Run, stream: str) -> None:
    refused = run("publish", stream, "x", "--ack-policy", "none", "--print-acks")
    assert refused.returncode == 2 and "--print-acks" in refused.stderr


def test_follow_prints_new_messages_until_interrupted(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    process = subprocess.Popen(
        [*CLI, "subscribe", stream, "-P", "0", "--follow", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(liftbridge_address),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        # new-only: keep publishing until the subscription has seen one, then two more.
        deadline = time.monotonic() + 30
        while not lines and time.monotonic() < deadline:
            liftbridge_client.publish(stream, b"early", partition=0)
            reader.join(timeout=0.2)
        assert lines, "follow printed nothing"
        liftbridge_client.publish(stream, b"late-1", partition=0)
        liftbridge_client.publish(stream, b"late-2", partition=0)
        deadline = time.monotonic() + 30
        while sum("late" in line for line in lines) < 2 and time.monotonic() < deadline:
            reader.join(timeout=0.05)
        values = [json.loads(line)["value"] for line in lines]
        assert values[-2:] == ["late-1", "late-2"]
        offsets = [json.loads(line)["offset"] for line in lines]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    finally:
        _, err = interrupt(process)
    assert process.returncode == 130, err
    assert "Traceback" not in err


def test_sigterm_stops_follow_as_ctrl_c_does_with_its_own_exit_code(
    liftbridge_address: str, stream: str, liftbridge_client: Client
) -> None:
    """SIGTERM (``kill``, systemd, a CI timeout) ended the process on the spot: exit 143
    without a word, nothing flushed, the subscription not closed."""
    with subprocess.Popen(
        [*CLI, "subscribe", stream, "-P", "0", "--follow", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(liftbridge_address),
    ) as process:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(process.stdout or []))
        reader.start()
        try:
            deadline = time.monotonic() + 30
            while not lines and time.monotonic() < deadline:
                liftbridge_client.publish(stream, b"before-term", partition=0)
                reader.join(timeout=0.2)
            assert lines, "follow printed nothing"
            _signal_and_wait(process, signal.SIGTERM, "SIGTERM")
        finally:
            process.kill()
            process.wait(timeout=30)
            reader.join(timeout=30)
        err = process.stderr.read() if process.stderr else ""
    assert process.returncode == 143, err
    assert err.strip().splitlines()[-1] == "liftbridge-sync: terminated", err
    assert "Traceback" not in err
    assert all(json.loads(line)["value"] == "before-term" for line in lines)


@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
)
def test_one_signal_ends_a_publish_waiting_to_open_a_fifo(
    liftbridge_address: str, stream: str, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    """Opening a FIFO no writer has opened waits in the kernel; the handler only
    recorded the signal and Python restarted the open(): a service manager's one
    SIGTERM was lost, and only a second signal ended the command."""
    fifo = tmp_path / "lines"
    os.mkfifo(fifo)
    with subprocess.Popen(
        [*CLI, "publish", stream, "-f", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(liftbridge_address),
    ) as process:
        try:
            # The kernel parks an open() of a FIFO without a writer in wait_for_partner.
            wchan = Path(f"/proc/{process.pid}/wchan")
            wait_until(lambda: "partner" in wchan.read_text(), 30, what="the open() of the FIFO")
            _signal_and_wait(process, signum, f"one {signal.Signals(signum).name}")
        finally:
            process.kill()
            process.wait(timeout=30)
        err = process.stderr.read() if process.stderr else ""
    assert process.returncode == code, err
    assert err.strip().splitlines()[-1].startswith(f"liftbridge-sync: {said}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("partition", [("-P", "0"), ()], ids=["partition", "stream"])
def test_follow_ends_when_its_reader_goes_away_without_another_message(
    liftbridge_address: str, stream: str, liftbridge_client: Client, partition: tuple[str, ...]
) -> None:
    """``subscribe --follow | head -n 1`` on a quiet stream: the closed pipe was seen only
    at the next message's write, so the command waited on, maybe forever."""
    with subprocess.Popen(
        [*CLI, "subscribe", stream, *partition, "--follow", "--start", "earliest"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(liftbridge_address),
        bufsize=0,
    ) as process:
        assert process.stdout is not None
        try:
            liftbridge_client.publish(stream, b"only", partition=0)
            readable, _, _ = select.select([process.stdout], [], [], 30)
            assert readable, "follow printed nothing within 30 s"
            process.stdout.close()  # as head does after its line; no message comes after
            _ends_within(process, 15, "still following 15 s after its reader went away")
        finally:
            process.kill()
            process.wait(timeout=30)
        err = (process.stderr.read() if process.stderr else b"").decode(errors="replace")
    assert process.returncode == 141, err
    assert err == "", err


def test_empty_ranges_exit_zero_with_no_output(
    run: Run, stream: str, liftbridge_client: Client
) -> None:
    for i in range(3):
        liftbridge_client.publish(stream, f"m{i}".encode(), partition=0)
    for args in (
        ("--start", "new"),  # new-only without --follow: nothing is new yet
        ("--start", "offset:9999"),  # past the end
        ("--start", "latest", "--stop", "offset:0"),  # stop before start
    ):
        result = run("subscribe", stream, "-P", "0", *args)
        assert (result.returncode, result.stdout) == (0, ""), (args, result.stderr)
        assert "Stop offset is before start offset" not in result.stderr


def test_publish_to_an_unreachable_broker_is_exit_5_within_seconds(stream: str) -> None:
    env = cli_env("127.0.0.1:1")
    started = time.monotonic()
    result = subprocess.run(
        [*CLI, "--timeout", "1", "publish", stream, "x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 5, result.stderr
    assert "127.0.0.1:1" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 20  # the retry policy's bound, not an ack timeout
