"""CPU per row of the ``foreachPartition`` sink's own code, without Spark.

Run: ``python -m bench.spark_sink_cpu [--rows 100000] [--size 256] [--rounds 3]
[--partitions 1] [--profile]``.
Feeds ``pyspark.sql.Row`` objects shaped like :mod:`bench.spark`'s rows (a string key,
a ``--size``-byte binary value) to :meth:`PartitionPublisher.publish` against a real
server (harness), on a stream of ``--partitions`` partitions (the sink spreads keyed rows
by key), and prints the process CPU seconds per row (all threads: the task's
thread and the run threads share one GIL in a Spark worker, so all of it counts) and
the task thread's own. ``--profile`` adds a cProfile of every thread.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from bench._profile import _report, _ThreadProfiles
from liftbridge_sync import Client
from liftbridge_sync.spark import publish_partition
from liftbridge_sync.testing import LiftbridgeServer


def _rows(count: int, size: int) -> list[Any]:
    from pyspark.sql import Row

    shape = Row("key", "value")
    return [shape(str(i), str(i).ljust(size, "x").encode()) for i in range(count)]


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
    with LiftbridgeServer() as server, Client(server.address) as client:

        def fresh() -> str:
            name = f"bench-sink-{uuid.uuid4().hex[:8]}"
            client.create_stream(name, name, partitions=args.partitions)
            return name

        publish_partition(server.address, fresh()).publish(rows[:2000])  # warm the client
        best = (float("inf"), float("inf"))
        for _ in range(args.rounds):
            publisher = publish_partition(server.address, fresh())
            cpu, task = time.process_time(), time.thread_time()
            summary = publisher.publish(rows)
            cpu, task = time.process_time() - cpu, time.thread_time() - task
            assert summary.count == args.rows, summary
            best = min(best, (cpu / args.rows, task / args.rows))
            print(
                f"process {cpu / args.rows * 1e6:.2f} us/row, task thread "
                f"{task / args.rows * 1e6:.2f} us/row"
            )
        print(f"best: process {best[0] * 1e6:.2f} us/row, task thread {best[1] * 1e6:.2f} us/row")
        if args.profile:
            # Every thread: the runs' publish_batch calls work on threads of their own.
            publisher = publish_partition(server.address, fresh())
            profiles = _ThreadProfiles()
            profiles.install()
            try:
                profiles.add_current("task thread").runcall(publisher.publish, rows)
            finally:
                profiles.uninstall()
            print(_report(profiles, 25, "foreachPartition sink, all threads"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
