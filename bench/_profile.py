"""``python -m bench profile [publish|subscribe]``: cProfile liftbridge_sync in-process.

cProfile only sees the thread that enables it, and our publisher does its work on its own
thread (plus grpcio's Python threads). A ``threading.setprofile`` hook therefore starts a
separate profiler in every thread created while profiling; the report shows CPU per
thread, then all threads merged, by total (self) time and by cumulative time.

The profilers use ``time.thread_time`` (CPU time of the calling thread), not wall time:
blocking in ``lock.acquire`` or ``queue.get`` then costs nothing, and the figures say
where CPU goes. Native grpc core threads (not Python threads) are not seen.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType
from typing import Any

from bench._fill import fill_stream
from bench._ours import make_payloads
from bench._report import num
from bench._runner import REPO_ROOT, publish_command
from bench._server import BenchServer
from bench._stats import cpu_seconds

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the profile command."""
    parser.add_argument(
        "--profile-messages", type=int, default=20000, help="messages to profile (20000)"
    )
    parser.add_argument("--profile-window", type=int, default=1000, help="batch window (1000)")
    parser.add_argument("--profile-top", type=int, default=25, help="rows per listing (25)")
    parser.add_argument(
        "--perf",
        action="store_true",
        help="also sample the publish worker with `perf record` (native + kernel view)",
    )


class _ThreadProfiles:
    """A profiler per thread started while installed, plus one for the calling thread."""

    def __init__(self) -> None:
        self.profiles: list[tuple[str, cProfile.Profile]] = []
        self._lock = threading.Lock()

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        sys.setprofile(None)
        profile = cProfile.Profile(time.thread_time)
        with self._lock:
            self.profiles.append((threading.current_thread().name, profile))
        profile.enable()

    def install(self) -> None:
        threading.setprofile(self._hook)

    def uninstall(self) -> None:
        threading.setprofile(None)

    def add_current(self, name: str) -> cProfile.Profile:
        profile = cProfile.Profile(time.thread_time)
        with self._lock:
            self.profiles.append((name, profile))
        return profile


def _report(profiles: _ThreadProfiles, top: int, header: str) -> str:
    """The report of ``profiles``; call it once every profiled thread has ended (close
    the client first). A profiler read while its thread still waits in a call charges
    that call, at the read, with the *reading* thread's ``thread_time`` minus the
    waiting thread's at the call's start: a blocked ``epoll.poll`` or
    ``SimpleQueue.get`` then shows about the main thread's CPU time as its own
    (bench/HISTORY.md 2026-11-28 17:45)."""
    out = io.StringIO()
    out.write(header + "\n\nThread CPU seen by cProfile (sum of self time):\n")
    merged: pstats.Stats | None = None
    for name, profile in profiles.profiles:
        stats = pstats.Stats(profile, stream=out)
        total = sum(entry[2] for entry in stats.stats.values())  # type: ignore[attr-defined]
        out.write(f"  {name:<40} {total:8.3f} s\n")
        if merged is None:
            merged = stats
        else:
            merged.add(stats)
    if merged is None:
        return out.getvalue()
    merged.stream = out  # type: ignore[attr-defined]
    for key, title in (("tottime", "total (self) time"), ("cumulative", "cumulative time")):
        out.write(f"\nAll threads merged, top {top} by {title}:\n")
        merged.sort_stats(key).print_stats(top)
    return out.getvalue()


def _profile_publish(args: argparse.Namespace, server: BenchServer) -> str:
    from liftbridge_sync import Client

    n, window = args.profile_messages, args.profile_window
    stream = server.fresh_stream("profile")
    payloads = make_payloads(n, args.message_size)
    profiles = _ThreadProfiles()
    profiles.install()
    try:
        client = Client([server.address], max_in_flight=max(window, 1024), ack_timeout=60.0)
        client.publish(stream, b"warm-up")
        main_profile = profiles.add_current("MainThread (publish_async + flush)")
        user0, sys0 = cpu_seconds()
        start = time.perf_counter()
        main_profile.enable()
        for base in range(0, n, window):
            for value in payloads[base : base + window]:
                client.publish_async(stream, value)
            client.flush()
        main_profile.disable()
        elapsed = time.perf_counter() - start
        user1, sys1 = cpu_seconds()
        client.close()
    finally:
        profiles.uninstall()
        server.drop_stream(stream)
    cpu = (user1 - user0) + (sys1 - sys0)
    header = (
        f"## Profile: liftbridge_sync publish_async, batch window {window}, {n:,} × "
        f"{args.message_size} B (under cProfile: slower than the bench)\n\n"
        f"{num(n / elapsed)} msgs/s, process CPU {num(cpu / n * 1e6)} µs/msg "
        f"(user {user1 - user0:.2f} s, sys {sys1 - sys0:.2f} s, wall {elapsed:.2f} s)"
    )
    return _report(profiles, args.profile_top, header)


def _profile_subscribe(args: argparse.Namespace, server: BenchServer) -> str:
    from liftbridge_sync import Client, StartAt, StopAt

    n = args.profile_messages
    stream = server.fresh_stream("profile-sub")
    profiles = _ThreadProfiles()
    try:
        fill_stream(server.address, stream, n, args.message_size, 10_000)
        profiles.install()
        client = Client([server.address])
        client.fetch_metadata(stream)
        main_profile = profiles.add_current("MainThread (subscribe loop)")
        count = 0
        user0, sys0 = cpu_seconds()
        start = time.perf_counter()
        main_profile.enable()
        for _msg in client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()):
            count += 1
        main_profile.disable()
        elapsed = time.perf_counter() - start
        user1, sys1 = cpu_seconds()
        client.close()
    finally:
        profiles.uninstall()
        server.drop_stream(stream)
    cpu = (user1 - user0) + (sys1 - sys0)
    header = (
        f"## Profile: liftbridge_sync subscribe, {count:,} × {args.message_size} B from "
        f"earliest (under cProfile)\n\n{num(count / elapsed)} msgs/s, process CPU "
        f"{num(cpu / max(count, 1) * 1e6)} µs/msg"
    )
    return _report(profiles, args.profile_top, header)


def _perf_table(data: str, sort: str, top: int) -> str:
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", sort, "-g", "none", "--stdio"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    rows = [line for line in out.splitlines() if line.strip() and not line.startswith("#")]
    return "\n".join(rows[:top])


def _perf_publish(args: argparse.Namespace, server: BenchServer) -> str:
    """Sample the (unprofiled) publish worker process with ``perf record``."""
    if shutil.which("perf") is None:
        return "## perf: not available (no `perf` on PATH)"
    n, window = args.profile_messages, args.profile_window
    stream = server.fresh_stream("perf")
    try:
        with tempfile.TemporaryDirectory(prefix="lbbench-perf-") as tmp:
            data = f"{tmp}/perf.data"
            worker = publish_command(
                "ours", server.address, stream, n, args.message_size, "batch", window
            )
            proc = subprocess.run(
                ["perf", "record", "-q", "-F", "999", "-g", "-o", data, "--", *worker],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                return f"## perf: `perf record` failed: {proc.stderr.strip()[-500:]}"
            by_dso = _perf_table(data, "dso", 12)
            by_sym = _perf_table(data, "dso,sym", args.profile_top)
    finally:
        server.drop_stream(stream)
    return (
        f"## perf: liftbridge_sync publish worker, batch window {window}, {n:,} × "
        f"{args.message_size} B (whole process incl. start-up; 999 Hz samples)\n\n"
        f"Worker result: {proc.stdout.strip()}\n\nBy shared object:\n{by_dso}\n\n"
        f"Top symbols:\n{by_sym}"
    )


def run(args: argparse.Namespace, server: BenchServer) -> str:
    """Run the profile selected by ``args.what`` (default publish) and return the report."""
    if getattr(args, "what", "publish") == "subscribe":
        return _profile_subscribe(args, server)
    report = _profile_publish(args, server)
    if args.perf:
        report += "\n\n" + _perf_publish(args, server)
    return report
