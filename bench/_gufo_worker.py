"""Worker for gufo-liftbridge, run by path with the interpreter of its own virtualenv.

Standalone on purpose (stdlib + ``gufo.liftbridge`` only): gufo ships its own copy of
Liftbridge's ``proto`` package, which cannot share a process with liftbridge_sync's.

* ``publish --mode sync``: one acknowledged message at a time, each through its own
  ``publish_bulk([request])`` call (gufo's unary ``publish`` sends no deadline, so the
  server never acks it).
* ``publish --mode batch --window N``: one ``publish_bulk`` call (a ``PublishAsync``
  stream) per window of N requests, waiting for all N acks: the Go bench's pub-batch.
* ``subscribe``: ``client.subscribe(start_position=EARLIEST)`` until ``--expected``.

Prints one JSON object; latencies (ns, int64) go to ``--latencies-out``.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any


def _cpu() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_nvcsw + usage.ru_nivcsw


async def publish(args: argparse.Namespace) -> tuple[dict[str, Any], list[int]]:
    from gufo.liftbridge.client import LiftbridgeClient  # type: ignore[import-not-found,unused-ignore]

    n, size = args.messages, args.message_size
    flat = os.urandom(n * size)
    payloads = [flat[i * size : (i + 1) * size] for i in range(n)]
    starts = [0] * n
    lat = [0] * n
    clock = time.perf_counter_ns
    failed_windows = 0
    window = 1 if args.mode == "sync" else args.window
    async with LiftbridgeClient([args.servers]) as client:
        # Connect and warm up one PublishAsync stream before timing.
        warm = client.get_publish_request(b"warm-up", stream=args.stream)
        async for _ in client.publish_bulk([warm]):
            pass

        def requests(base: int, end: int) -> Iterator[Any]:
            for i in range(base, end):
                starts[i] = clock()
                yield client.get_publish_request(
                    payloads[i], stream=args.stream, correlation_id=str(i)
                )

        user0, sys0, switches0 = _cpu()
        start = time.perf_counter()
        for base in range(0, n, window):
            try:
                # publish_bulk yields the raw PublishResponse of each request.
                async for resp in client.publish_bulk(requests(base, min(base + window, n))):
                    if resp.HasField("asyncError") or resp.ack.ackError:
                        continue
                    i = int(resp.ack.correlationId)
                    lat[i] = clock() - starts[i]
            except (asyncio.CancelledError, Exception):
                # publish_bulk's drain_wait can miss the last ack (its `done` event is
                # created after the request iterator ends); it then waits for
                # publish_async_ack_timeout (10 s) and the call is cancelled.
                failed_windows += 1
        elapsed = time.perf_counter() - start
        user1, sys1, switches1 = _cpu()
    errors = sum(1 for v in lat if v == 0)
    return {
        "client": "gufo",
        "duration": elapsed,
        "total_messages": n,
        "messages_per_second": n / elapsed,
        "cpu_user_s": user1 - user0,
        "cpu_sys_s": sys1 - sys0,
        "context_switches": switches1 - switches0,
        "errors": errors,
        "failed_windows": failed_windows,
    }, lat


async def subscribe(args: argparse.Namespace) -> dict[str, Any]:
    from gufo.liftbridge.client import LiftbridgeClient  # type: ignore[import-not-found,unused-ignore]
    from gufo.liftbridge.types import StartPosition  # type: ignore[import-not-found,unused-ignore]

    count = 0
    nbytes = 0
    async with LiftbridgeClient([args.servers]) as client:
        await client.get_metadata()  # connect before timing
        user0, sys0, switches0 = _cpu()
        start = time.perf_counter()
        async for msg in client.subscribe(
            args.stream, partition=0, start_position=StartPosition.EARLIEST
        ):
            count += 1
            nbytes += len(msg.value)
            if count >= args.expected:
                break
        elapsed = time.perf_counter() - start
        user1, sys1, switches1 = _cpu()
    return {
        "client": "gufo",
        "duration": elapsed,
        "total_messages": count,
        "total_bytes": nbytes,
        "messages_per_second": count / elapsed,
        "cpu_user_s": user1 - user0,
        "cpu_sys_s": sys1 - sys0,
        "context_switches": switches1 - switches0,
        "errors": 0 if count == args.expected else 1,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="_gufo_worker.py")
    commands = parser.add_subparsers(dest="command", required=True)
    pub = commands.add_parser("publish")
    pub.add_argument("--servers", required=True)
    pub.add_argument("--stream", required=True)
    pub.add_argument("--messages", type=int, required=True)
    pub.add_argument("--message-size", type=int, default=256)
    pub.add_argument("--mode", choices=("sync", "batch"), default="batch")
    pub.add_argument("--window", type=int, default=100)
    pub.add_argument("--latencies-out", default=None)
    sub = commands.add_parser("subscribe")
    sub.add_argument("--servers", required=True)
    sub.add_argument("--stream", required=True)
    sub.add_argument("--expected", type=int, required=True)
    commands.add_parser("version")
    return parser


def main() -> int:
    args = _parser().parse_args()
    if args.command == "version":
        from importlib.metadata import version

        names = ("gufo_liftbridge", "grpcio", "protobuf")
        print(json.dumps({name: version(name) for name in names}))
        return 0
    if args.command == "publish":
        result, lat = asyncio.run(publish(args))
        if args.latencies_out:
            with open(args.latencies_out, "wb") as out:
                array.array("q", lat).tofile(out)
    else:
        result = asyncio.run(subscribe(args))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
