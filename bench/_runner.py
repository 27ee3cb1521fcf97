"""Running one client worker in its own process and turning its output into a record."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import _go, _gufo
from bench._server import BenchServer
from bench._stats import load_latencies, proc_cpu_seconds, summarize_latencies

__all__ = [
    "CLIENTS",
    "RunRecord",
    "SUBSCRIBE_CLIENTS",
    "WorkerFailed",
    "publish_command",
    "run_worker",
    "subscribe_command",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
#: ``ours`` is liftbridge_sync as configured by default (``Client([addr])``: the h2
#: transports); ``ours-grpc`` forces grpcio for publishing and for subscribing;
#: ``ours-h2`` forces the h2 publish transport; ``ours-batch`` publishes with the bulk API
#: ``publish_batch``; ``ours-otel`` is ``ours`` with an OpenTelemetry SDK configured
#: (spans to a batch processor whose exporter drops them, metrics to a reader), the cost
#: of tracing every publish. ``ours`` itself runs with the API installed and no SDK.
CLIENTS = ("go", "ours", "ours-grpc", "ours-h2", "ours-batch", "ours-otel", "gufo")
SUBSCRIBE_CLIENTS = ("go", "ours", "ours-grpc", "gufo")
_TIMEOUT = 600.0


class WorkerFailed(RuntimeError):
    """A worker process exited with an error (the bench goes on without its record)."""


@dataclass
class RunRecord:
    """One measured run of one client in one scenario."""

    bench: str
    scenario: str
    client: str
    round: int
    messages: int
    msgs_per_s: float
    p50_us: float
    p99_us: float
    client_cpu_us_per_msg: float
    server_cpu_us_per_msg: float
    context_switches_per_msg: float
    errors: int
    duration_s: float
    stalled_windows: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return asdict(self)


def publish_command(
    client: str,
    address: str,
    stream: str,
    messages: int,
    size: int,
    mode: str,
    window: int,
    threads: int = 1,
) -> list[str]:
    """The command line of a publish worker (mode ``sync``, ``batch`` or ``sliding``;
    ``threads`` publishing threads sharing one client, in mode ``sync``)."""
    common = ["--servers", address, "--stream", stream, "--messages", str(messages)]
    common += ["--message-size", str(size)]
    if threads > 1:
        if mode != "sync" or client not in ("go", "ours"):
            raise ValueError(f"threads apply to mode sync of go and ours, not {mode} {client}")
        common += ["--threads", str(threads)]
    if client == "go":
        batch = 1 if mode == "sync" else window
        mode_arg = "sliding" if mode == "sliding" else "batch"
        return [str(_go.binary("producer")), *common, "--pub-batch", str(batch)] + [
            "--mode",
            mode_arg,
            "--ack-policy",
            "leader",
            "--output",
            "json",
        ]
    tail = ["--mode", mode, "--window", str(window)]
    ours = [sys.executable, "-m", "bench._ours", "publish", *common, *tail]
    if client == "ours":
        return ours
    if client in ("ours-grpc", "ours-h2"):
        return [*ours, "--publish-transport", client.removeprefix("ours-")]
    if client == "ours-batch":
        return [*ours, "--api", "batch"]
    if client == "ours-otel":
        return [*ours, "--otel"]
    if client == "gufo":
        return [str(_gufo.python()), str(_gufo.WORKER), "publish", *common, *tail]
    raise ValueError(f"unknown client {client!r}")


def subscribe_command(client: str, address: str, stream: str, expected: int) -> list[str]:
    """The command line of a subscribe worker (read all from earliest)."""
    common = ["--servers", address, "--stream", stream, "--expected", str(expected)]
    if client == "go":
        return [str(_go.binary("consumer")), *common, "--start", "earliest", "--output", "json"]
    if client == "ours":
        return [sys.executable, "-m", "bench._ours", "subscribe", *common]
    if client == "ours-grpc":
        return [sys.executable, "-m", "bench._ours", "subscribe", *common] + [
            "--subscribe-transport",
            "grpc",
        ]
    if client == "gufo":
        return [str(_gufo.python()), str(_gufo.WORKER), "subscribe", *common]
    raise ValueError(f"unknown client {client!r}")


def run_worker(
    command: list[str],
    server: BenchServer,
    *,
    bench: str,
    scenario: str,
    client: str,
    round_no: int,
    messages: int,
    latencies: bool,
) -> RunRecord:
    """Run ``command`` to completion and build its record.

    Python workers write latencies to a temporary file (``--latencies-out``); the Go
    producer reports its own percentiles (same nearest-rank definition).
    """
    with tempfile.TemporaryDirectory(prefix="lbbench-") as tmp:
        lat_path = Path(tmp) / "latencies.bin"
        if latencies and client != "go":
            command = [*command, "--latencies-out", str(lat_path)]
        server_before = proc_cpu_seconds(server.pid) if server.pid else None
        proc = subprocess.run(
            command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=_TIMEOUT
        )
        server_after = proc_cpu_seconds(server.pid) if server.pid else None
        if proc.returncode != 0:
            raise WorkerFailed(
                f"{client} {scenario} failed ({proc.returncode}): {proc.stderr[-2000:]}"
            )
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if latencies and client != "go":
            result.update(summarize_latencies(load_latencies(lat_path)))
    server_cpu = math.nan
    if server_before is not None and server_after is not None:
        server_cpu = (server_after - server_before) / messages * 1e6
    return RunRecord(
        bench=bench,
        scenario=scenario,
        client=client,
        round=round_no,
        messages=messages,
        msgs_per_s=float(result["messages_per_second"]),
        p50_us=float(result.get("latency_p50_us", math.nan)),
        p99_us=float(result.get("latency_p99_us", math.nan)),
        client_cpu_us_per_msg=(result["cpu_user_s"] + result["cpu_sys_s"]) / messages * 1e6,
        server_cpu_us_per_msg=server_cpu,
        context_switches_per_msg=float(result.get("context_switches", math.nan)) / messages,
        errors=int(result.get("errors", 0)),
        duration_s=float(result["duration"]),
        stalled_windows=int(result.get("failed_windows", 0)),
    )
