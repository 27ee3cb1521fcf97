"""``python -m bench subscribe``: catch-up reads of a pre-filled stream, alternating clients."""

from __future__ import annotations

import argparse
import sys

from bench._env import load_average
from bench._fill import fill_stream
from bench._report import num, scenario_table
from bench._runner import SUBSCRIBE_CLIENTS, RunRecord, WorkerFailed, run_worker, subscribe_command
from bench._server import BenchServer

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the subscribe bench."""
    parser.add_argument(
        "--subscribe-messages", type=int, default=200_000, help="messages to read (200000)"
    )
    parser.add_argument(
        "--fill-window", type=int, default=10_000, help="publish_async window for the fill"
    )


def run(
    args: argparse.Namespace, server: BenchServer, clients: tuple[str, ...]
) -> tuple[list[RunRecord], list[str]]:
    """Fill one stream, warm up on a small one, then ``args.rounds`` rounds of reads."""
    # The publish-only variants of our client (transport, bulk API) do not subscribe.
    clients = tuple(c for c in clients if c in SUBSCRIBE_CLIENTS)
    total = args.subscribe_messages
    stream = server.fresh_stream("subscribe")
    warm_stream = server.fresh_stream("subscribe-warmup")
    rate = fill_stream(server.address, stream, total, args.message_size, args.fill_window)
    print(f"[subscribe] filled {total:,} messages at {num(rate)} msgs/s", file=sys.stderr)
    fill_stream(server.address, warm_stream, args.warmup_messages, args.message_size, 1000)
    records: list[RunRecord] = []
    failures: list[str] = []
    try:
        for round_no in range(-1, args.rounds):
            warmup = round_no < 0
            target, expected = (warm_stream, args.warmup_messages) if warmup else (stream, total)
            print(
                f"[subscribe] round {'warm-up' if warmup else round_no + 1}/{args.rounds}"
                f" load {load_average():.2f}",
                file=sys.stderr,
            )
            k = max(round_no, 0) % len(clients)
            for client in clients[k:] + clients[:k]:
                try:
                    rec = run_worker(
                        subscribe_command(client, server.address, target, expected),
                        server,
                        bench="subscribe",
                        scenario="subscribe",
                        client=client,
                        round_no=round_no,
                        messages=expected,
                        latencies=False,
                    )
                except WorkerFailed as exc:
                    last = str(exc).strip().splitlines()[-1:] or [repr(exc)]
                    print(f"  subscribe {client:>4}: FAILED: {last[0]}", file=sys.stderr)
                    failures.append(f"round {round_no + 1} {client}: {last[0]}")
                    continue
                print(
                    f"  subscribe {client:>4}: {num(rec.msgs_per_s):>8} msgs/s"
                    f"  client {num(rec.client_cpu_us_per_msg):>5} µs/msg"
                    f"  server {num(rec.server_cpu_us_per_msg):>5} µs/msg"
                    f"  ctxsw {num(rec.context_switches_per_msg):>5}/msg"
                    + (f"  ERRORS {rec.errors}" if rec.errors else ""),
                    file=sys.stderr,
                )
                if not warmup:
                    records.append(rec)
    finally:
        server.drop_stream(stream)
        server.drop_stream(warm_stream)
    title = (
        f"### subscribe: {total:,} × {args.message_size} B from earliest "
        f"(fill: liftbridge_sync publish_async, window {args.fill_window:,}: "
        f"{num(rate)} msgs/s)"
    )
    tables = [title + "\n\n" + scenario_table(records, "subscribe", clients, True)]
    if failures:
        tables.append(
            "Failed subscribe runs (no record):\n\n" + "\n".join(f"* {f}" for f in failures)
        )
    return records, tables
