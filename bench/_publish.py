"""``python -m bench publish``: Go vs liftbridge_sync vs gufo, alternating rounds."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from bench._env import load_average, steal_ticks
from bench._report import num, scenario_table
from bench._runner import RunRecord, WorkerFailed, publish_command, run_worker
from bench._server import BenchServer

__all__ = ["Scenario", "add_arguments", "run", "scenarios"]


@dataclass(frozen=True)
class Scenario:
    """One publish scenario: ``sync``, ``batch`` (fire N, wait for N) or ``sliding``."""

    name: str
    mode: str
    window: int
    messages: int
    clients: tuple[str, ...]
    threads: int = 1  # sync only: threads (goroutines) sharing one client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the publish bench."""
    parser.add_argument("--sync-messages", type=int, default=5000, help="per sync run (5000)")
    parser.add_argument(
        "--async-messages", type=int, default=20000, help="per pipelined run (20000)"
    )
    parser.add_argument(
        "--windows", default="100,1000", help="batch windows, comma-separated (100,1000)"
    )
    parser.add_argument(
        "--sliding", type=int, default=1000, help="sliding-window size; 0 disables (1000)"
    )
    parser.add_argument(
        "--no-sync", action="store_true", help="skip the one-thread synchronous scenario"
    )
    parser.add_argument(
        "--sync-threads",
        default="8",
        help="threads sharing one client in the threaded sync scenario, comma-separated "
        "for several (2,8,64); 0 disables (8)",
    )


def scenarios(args: argparse.Namespace, clients: tuple[str, ...]) -> list[Scenario]:
    """The scenarios selected by the flags (gufo has no sliding-window API)."""
    result = []
    # publish_batch of one message is not a scenario of its own.
    sync_clients = tuple(c for c in clients if c != "ours-batch")
    if not args.no_sync:
        result.append(Scenario("sync", "sync", 1, args.sync_messages, sync_clients))
    for threads in (int(n) for n in str(args.sync_threads).split(",") if n.strip()):
        if threads <= 1:
            continue
        result.append(
            Scenario(
                f"sync-{threads}-threads",
                "sync",
                1,
                args.sync_messages // threads * threads,
                tuple(c for c in sync_clients if c != "gufo"),  # its API is asyncio
                threads,
            )
        )
    for window in (int(w) for w in args.windows.split(",") if w.strip()):
        result.append(Scenario(f"batch-{window}", "batch", window, args.async_messages, clients))
    if args.sliding:
        sliding_clients = tuple(c for c in clients if c != "gufo")
        result.append(
            Scenario(
                f"sliding-{args.sliding}",
                "sliding",
                args.sliding,
                args.async_messages,
                sliding_clients,
            )
        )
    return result


def _rotate(items: tuple[str, ...], n: int) -> tuple[str, ...]:
    if not items:
        return items
    k = n % len(items)
    return items[k:] + items[:k]


def run(
    args: argparse.Namespace, server: BenchServer, clients: tuple[str, ...]
) -> tuple[list[RunRecord], list[str]]:
    """Warm-up round, then ``args.rounds`` measured rounds; returns records and tables."""
    selected = scenarios(args, clients)
    records: list[RunRecord] = []
    failures: list[str] = []
    for round_no in range(-1, args.rounds):
        warmup = round_no < 0
        steal0 = steal_ticks()
        print(
            f"[publish] round {'warm-up' if warmup else round_no + 1}/{args.rounds}"
            f" load {load_average():.2f}",
            file=sys.stderr,
        )
        for sc in selected:
            for client in _rotate(sc.clients, max(round_no, 0)):
                messages = min(args.warmup_messages, sc.messages) if warmup else sc.messages
                stream = server.fresh_stream(f"{sc.name}-{client}")
                try:
                    cmd = publish_command(
                        client,
                        server.address,
                        stream,
                        messages,
                        args.message_size,
                        sc.mode,
                        sc.window,
                        sc.threads,
                    )
                    rec = run_worker(
                        cmd,
                        server,
                        bench="publish",
                        scenario=sc.name,
                        client=client,
                        round_no=round_no,
                        messages=messages,
                        latencies=True,
                    )
                except WorkerFailed as exc:
                    print(
                        f"  {sc.name:>13} {client:>4}: FAILED: {_last_line(exc)}", file=sys.stderr
                    )
                    failures.append(f"round {round_no + 1} {sc.name} {client}: {_last_line(exc)}")
                    continue
                finally:
                    server.drop_stream(stream)
                print(
                    f"  {sc.name:>13} {client:>4}: {num(rec.msgs_per_s):>8} msgs/s"
                    f"  p50 {num(rec.p50_us):>7} µs  p99 {num(rec.p99_us):>7} µs"
                    f"  client {num(rec.client_cpu_us_per_msg):>5} µs/msg"
                    f"  server {num(rec.server_cpu_us_per_msg):>5} µs/msg"
                    f"  ctxsw {num(rec.context_switches_per_msg):>5}/msg"
                    + (f"  ERRORS {rec.errors}" if rec.errors else "")
                    + (f"  STALLED WINDOWS {rec.stalled_windows}" if rec.stalled_windows else ""),
                    file=sys.stderr,
                )
                if not warmup:
                    records.append(rec)
        steal = steal_ticks() - steal0
        if steal:
            print(f"  (steal during round: {steal} ticks)", file=sys.stderr)
    tables = []
    for sc in selected:
        title = f"### publish {sc.name}: {sc.messages:,} × {args.message_size} B, ack LEADER"
        tables.append(title + "\n\n" + scenario_table(records, sc.name, sc.clients))
    if failures:
        tables.append(
            "Failed publish runs (no record):\n\n" + "\n".join(f"* {f}" for f in failures)
        )
    return records, tables


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else repr(exc)
