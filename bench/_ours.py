"""Worker for liftbridge_sync: ``python -m bench._ours publish|subscribe ...``.

Runs in its own process so that its CPU time is attributable. Prints one JSON object
on stdout; per-message ack latencies (nanoseconds) go to ``--latencies-out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench._stats import context_switches, cpu_seconds, save_latencies

__all__ = ["main", "run_publish", "run_subscribe"]


def make_payloads(messages: int, size: int) -> list[bytes]:
    """Pre-generate ``messages`` random payloads of ``size`` bytes."""
    flat = os.urandom(messages * size)
    return [flat[i * size : (i + 1) * size] for i in range(messages)]


def _recorder(lat: list[int], i: int, t0: int, errors: list[int]) -> Callable[[Any], None]:
    """A done-callback storing message ``i``'s ack latency (ns since ``t0``) and counting
    a failure in ``errors[0]``, as the Go bench's callback does: nothing keeps the future
    once it has resolved."""
    clock = time.perf_counter_ns

    def done(future: Any) -> None:
        lat[i] = clock() - t0
        if future.exception() is not None:
            errors[0] += 1

    return done


def _counter(errors: list[int]) -> Callable[[Any], None]:
    """A done-callback counting failures in ``errors[0]`` (no latencies recorded)."""

    def done(future: Any) -> None:
        if future.exception() is not None:
            errors[0] += 1

    return done


def run_publish(
    servers: str,
    stream: str,
    *,
    messages: int,
    size: int,
    mode: str,
    window: int,
    latencies: bool = True,
    transport: str | None = None,
    api: str = "single",
    threads: int = 1,
) -> tuple[dict[str, Any], list[int]]:
    """Publish ``messages`` payloads to partition 0 of ``stream`` with ack LEADER.

    Modes: ``sync`` (``client.publish`` one at a time), ``batch`` (fire ``window``
    ``publish_async`` calls, then wait for all of them with ``flush``, like the Go
    bench's ``--pub-batch``), ``sliding`` (``max_in_flight=window``, publish all, flush).
    ``transport`` forces a publish transport (``None``: the client's default). With
    ``api="batch"`` the pipelined modes call ``publish_batch`` instead (one call per
    window; sliding: one call for everything, bounded by ``max_in_flight``); every
    message's latency is then the batch's (from the call to its return). In mode
    ``sync``, ``threads`` threads share the client, each publishing an equal share.

    Returns:
        The result record and the per-message latencies in nanoseconds.
    """
    from liftbridge_sync import Client

    payloads = make_payloads(messages, size)
    in_flight = window if mode == "sliding" else max(window, 1024)
    extra: dict[str, Any] = {} if transport is None else {"publish_transport": transport}
    client = Client([servers], max_in_flight=in_flight, ack_timeout=60.0, **extra)
    try:
        # Open the channel and the PublishAsync stream before timing, as Go's Connect does.
        client.publish(stream, b"warm-up")
        lat = [0] * messages
        failed = [0]  # futures that failed, counted by their done-callbacks
        count_failure = _counter(failed)
        clock = time.perf_counter_ns
        errors_seen = 0
        switches0 = context_switches()
        user0, sys0 = cpu_seconds()
        start = time.perf_counter()
        if mode == "sync" and threads > 1:
            _publish_from_threads(client, stream, payloads, lat, threads)
        elif mode == "sync":
            publish = client.publish
            for i, value in enumerate(payloads):
                t0 = clock()
                publish(stream, value)
                lat[i] = clock() - t0
        elif api == "batch":
            step = window if mode == "batch" else messages
            for base in range(0, messages, step):
                t0 = clock()
                outcomes = client.publish_batch(stream, payloads[base : base + step])
                t1 = clock()
                lat[base : base + step] = [t1 - t0] * len(outcomes)
                errors_seen += sum(1 for o in outcomes if isinstance(o, BaseException))
        else:
            publish_async = client.publish_async
            step = window if mode == "batch" else messages
            for base in range(0, messages, step):
                for i in range(base, min(base + step, messages)):
                    t0 = clock()
                    future = publish_async(stream, payloads[i])
                    future.add_done_callback(
                        _recorder(lat, i, t0, failed) if latencies else count_failure
                    )
                client.flush()
        elapsed = time.perf_counter() - start
        user1, sys1 = cpu_seconds()
        switches = context_switches() - switches0
    finally:
        client.close()  # joins the thread that runs the last done-callbacks
    errors = errors_seen + failed[0]
    result = {
        "client": "ours"
        + (f"-{transport}" if transport else "")
        + ("-batch" if api == "batch" else ""),
        "duration": elapsed,
        "total_messages": messages,
        "messages_per_second": messages / elapsed,
        "cpu_user_s": user1 - user0,
        "cpu_sys_s": sys1 - sys0,
        "context_switches": switches,
        "errors": errors,
    }
    return result, lat if latencies else []


def _publish_from_threads(
    client: Any, stream: str, payloads: list[bytes], lat: list[int], threads: int
) -> None:
    """``client.publish`` of every payload from ``threads`` threads (thread ``k`` takes
    every ``threads``-th payload from ``k``), each call's latency into ``lat``."""
    clock = time.perf_counter_ns
    publish = client.publish
    failures: list[BaseException] = []

    def work(first: int) -> None:
        try:
            for i in range(first, len(payloads), threads):
                t0 = clock()
                publish(stream, payloads[i])
                lat[i] = clock() - t0
        except BaseException as exc:  # re-raised below: the worker fails, as in one thread
            failures.append(exc)

    workers = [
        threading.Thread(target=work, args=(k,), name=f"bench-sync-{k}") for k in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]


def run_subscribe(
    servers: str, stream: str, *, expected: int, transport: str = "h2"
) -> dict[str, Any]:
    """Read ``stream`` partition 0 from earliest to latest; count messages and bytes."""
    from liftbridge_sync import Client, StartAt, StopAt

    client = Client([servers], subscribe_transport=transport)
    try:
        client.fetch_metadata(stream)  # open the channel before timing
        count = 0
        nbytes = 0
        switches0 = context_switches()
        user0, sys0 = cpu_seconds()
        start = time.perf_counter()
        for msg in client.subscribe(stream, start=StartAt.earliest(), stop=StopAt.latest()):
            count += 1
            nbytes += len(msg.value)
        elapsed = time.perf_counter() - start
        user1, sys1 = cpu_seconds()
        switches = context_switches() - switches0
    finally:
        client.close()
    return {
        "client": "ours" if transport == "h2" else "ours-grpc",
        "duration": elapsed,
        "total_messages": count,
        "total_bytes": nbytes,
        "messages_per_second": count / elapsed,
        "cpu_user_s": user1 - user0,
        "cpu_sys_s": sys1 - sys0,
        "context_switches": switches,
        "errors": 0 if count == expected else 1,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench._ours")
    commands = parser.add_subparsers(dest="command", required=True)
    pub = commands.add_parser("publish")
    pub.add_argument("--servers", required=True)
    pub.add_argument("--stream", required=True)
    pub.add_argument("--messages", type=int, required=True)
    pub.add_argument("--message-size", type=int, default=256)
    pub.add_argument("--mode", choices=("sync", "batch", "sliding"), default="batch")
    pub.add_argument("--window", type=int, default=100)
    pub.add_argument("--latencies-out", default=None)
    pub.add_argument("--publish-transport", choices=("grpc", "h2"), default=None)
    pub.add_argument("--api", choices=("single", "batch"), default="single")
    pub.add_argument("--threads", type=int, default=1)
    pub.add_argument("--otel", action="store_true", help="configure an OpenTelemetry SDK first")
    sub = commands.add_parser("subscribe")
    sub.add_argument("--servers", required=True)
    sub.add_argument("--stream", required=True)
    sub.add_argument("--expected", type=int, required=True)
    sub.add_argument("--subscribe-transport", choices=("grpc", "h2"), default="h2")
    return parser


def _configure_otel() -> None:
    """A global SDK as an application would set it: spans batched to an exporter (one
    that drops them, so the bench measures the client, not an exporter's I/O), metrics
    aggregated for a reader."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def main(argv: Sequence[str] | None = None) -> int:
    """Worker entry point."""
    args = _parser().parse_args(argv)
    if args.command == "publish":
        if args.otel:
            _configure_otel()
        result, lat = run_publish(
            args.servers,
            args.stream,
            messages=args.messages,
            size=args.message_size,
            mode=args.mode,
            window=args.window,
            transport=args.publish_transport,
            api=args.api,
            threads=args.threads,
        )
        if args.otel:
            result["client"] += "-otel"
        if args.latencies_out:
            save_latencies(args.latencies_out, lat)
    else:
        result = run_subscribe(
            args.servers, args.stream, expected=args.expected, transport=args.subscribe_transport
        )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
