"""CPU per row of the ``foreachPartition`` sink's own code, without Spark.

Run: ``python -m bench.spark_sink_cpu [--rows 100000] [--size 256] [--rounds 3]
[--partitions 1] [--profile]``.
Feeds ``pyspark.sql.Row`` objects shaped like :mod:`bench.spark`'s rows (a string key,
a ``--size``-byte binary value) to :meth:`PartitionPublisher.publish` against a real
server (harness), on a stream of ``--partitions`` partitions (the sink spreads keyed rows
by key), and prints the process CPU seconds per row (all threads: the task's
thread and the run threads share one GIL in a Spark worker, so all of it counts), split
by thread: the task's own, the client's threads that outlive the rounds (the publish
stream's I/O thread, the publisher's owner loop), and the threads that ended within
the round (each run's ``liftbridge-spark-run``). ``--profile`` adds a cProfile of every
thread, the client's own threads included (a client of its own, started under the
profiler; closed before the report, see :func:`bench._profile._report`).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from typing import Any

from bench._profile import _report, _ThreadProfiles
from bench._stats import stat_cpu_seconds
from liftbridge_sync import Client, ClientOptions
from liftbridge_sync.spark import publish_partition
from liftbridge_sync.testing import LiftbridgeServer


def _rows(count: int, size: int) -> list[Any]:
    from pyspark.sql import Row

    shape = Row("key", "value")
    return [shape(str(i), str(i).ljust(size, "x").encode()) for i in range(count)]


def _thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each live thread of this process, by native id."""
    cpu: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        seconds = stat_cpu_seconds(f"/proc/self/task/{tid}/stat")
        if seconds is not None:  # else it ended meanwhile
            cpu[int(tid)] = seconds
    return cpu


def _split(before: dict[int, float], after: dict[int, float], total: float) -> dict[str, float]:
    """``total`` CPU seconds split by thread name; what no live thread holds ended."""
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    split: dict[str, float] = {}
    for tid, seconds in after.items():
        spent = seconds - before.get(tid, 0.0)
        if spent > 0:
            name = names.get(tid, f"thread {tid}")
            split[name] = split.get(name, 0.0) + spent
    split["ended threads (runs)"] = max(0.0, total - sum(split.values()))
    return split


def main() -> int:
    """Measure and print CPU per row."""
    parser = argparse.ArgumentParser(prog="python -m bench.spark_sink_cpu")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    rows = _rows(args.rows, args.size)
    profiles = _ThreadProfiles()
    with LiftbridgeServer() as server, Client(server.address) as client:

        def fresh() -> str:
            name = f"bench-sink-{uuid.uuid4().hex[:8]}"
            client.create_stream(name, name, partitions=args.partitions)
            return name

        publish_partition(server.address, fresh()).publish(rows[:2000])  # warm the client
        best = (float("inf"), float("inf"))
        for _ in range(args.rounds):
            publisher = publish_partition(server.address, fresh())
            threads = _thread_cpu()
            cpu, task = time.process_time(), time.thread_time()
            summary = publisher.publish(rows)
            cpu, task = time.process_time() - cpu, time.thread_time() - task
            split = _split(threads, _thread_cpu(), cpu)
            assert summary.count == args.rows, summary
            best = min(best, (cpu / args.rows, task / args.rows))
            by_thread = ", ".join(
                f"{name} {seconds / args.rows * 1e6:.2f}"
                for name, seconds in sorted(split.items(), key=lambda kv: -kv[1])
                if seconds / args.rows >= 0.05e-6
            )
            print(
                f"process {cpu / args.rows * 1e6:.2f} us/row, task thread "
                f"{task / args.rows * 1e6:.2f} us/row; by thread (us/row): {by_thread}"
            )
        print(f"best: process {best[0] * 1e6:.2f} us/row, task thread {best[1] * 1e6:.2f} us/row")
        if args.profile:
            # A client of its own (Client.for_process keys them by options, and these
            # differ in one field), so that its I/O and owner threads start under the
            # profiler; the timed rounds' client ran without it.
            options = ClientOptions(addresses=(server.address,), rpc_timeout=10.5)
            profiles.install()
            try:
                publisher = publish_partition(
                    server.address, fresh(), client_options=options, check=False
                )
                profiles.add_current("task thread").runcall(publisher.publish, rows)
            finally:
                profiles.uninstall()
                Client.for_process(options).close()  # its threads end: see _report
            print(_report(profiles, 25, "foreachPartition sink, all threads"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
