"""Python's own floor for many threads that each wait for an answer (issue 27).

Run: ``python -m bench.thread_floor [--threads 1,2,8,64] [--seconds 3]`` with any
interpreter (it imports nothing of the client; ``$(pyenv prefix 3.13)/bin/python -m
bench.thread_floor`` measures 3.13).

N caller threads loop: queue a request, wake the answering thread, block on a lock of
their own. One answering thread takes everything queued and releases each caller's lock:
the least that ``publish()`` from N threads sharing one client must do in CPython (a
caller parks, is woken and takes the GIL back), with no encoding, no socket and no broker.
Prints round trips a second, the process's CPU (all threads) and context switches per
round trip.

What it bounds: a client whose callers park on OS threads cannot answer faster than this
on the same cores, and the broker needs its own CPU beside it. Go parks goroutines
without an OS switch, so its client has no such floor.
"""

from __future__ import annotations

import _thread
import argparse
import collections
import resource
import sys
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Floor:
    """One measurement: ``threads`` callers for ``seconds`` of wall time."""

    threads: int
    round_trips: int
    seconds: float
    cpu_seconds: float
    context_switches: int

    @property
    def rate(self) -> float:
        """Round trips a second."""
        return self.round_trips / self.seconds

    @property
    def cpu_per_trip_us(self) -> float:
        """CPU of the whole process (every thread) per round trip, microseconds."""
        return self.cpu_seconds / self.round_trips * 1e6

    @property
    def switches_per_trip(self) -> float:
        """Voluntary and involuntary context switches per round trip."""
        return self.context_switches / self.round_trips


def _usage() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw + usage.ru_nivcsw


def measure(threads: int, seconds: float) -> Floor:
    """Run ``threads`` callers against one answering thread for ``seconds``."""
    queued: collections.deque[_thread.LockType] = collections.deque()
    wake = threading.Condition(threading.Lock())
    stopping = threading.Event()  # callers: stop calling
    finished = threading.Event()  # answerer: every caller has left
    counts = [0] * threads

    def answer() -> None:
        while True:
            with wake:
                while not queued and not finished.is_set():
                    wake.wait()
            if finished.is_set():
                return
            while queued:
                queued.popleft().release()

    def call(index: int) -> None:
        mine = _thread.allocate_lock()
        mine.acquire()
        done = 0
        while not stopping.is_set():
            queued.append(mine)
            with wake:
                wake.notify()
            mine.acquire()
            done += 1
        counts[index] = done

    answerer = threading.Thread(target=answer, name="floor-answer", daemon=True)
    callers = [
        threading.Thread(target=call, args=(i,), name=f"floor-call-{i}", daemon=True)
        for i in range(threads)
    ]
    answerer.start()
    cpu_before, switches_before = _usage()
    start = time.perf_counter()
    for caller in callers:
        caller.start()
    stopping.wait(seconds)  # the measured interval itself, not a synchronisation
    stopping.set()
    for caller in callers:  # the answerer keeps answering until each has left
        caller.join()
    elapsed = time.perf_counter() - start
    cpu_after, switches_after = _usage()
    finished.set()
    with wake:
        wake.notify()
    answerer.join()
    return Floor(
        threads=threads,
        round_trips=sum(counts),
        seconds=elapsed,
        cpu_seconds=cpu_after - cpu_before,
        context_switches=switches_after - switches_before,
    )


def main() -> int:
    """Measure each thread count and print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m bench.thread_floor")
    parser.add_argument("--threads", default="1,2,8,64")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}")
    print("| threads | round trips/s | CPU µs/trip | context switches/trip |")
    print("|---|---|---|---|")
    for threads in (int(n) for n in args.threads.split(",")):
        floor = measure(threads, args.seconds)
        print(
            f"| {threads} | {floor.rate:,.0f} | {floor.cpu_per_trip_us:.1f} | "
            f"{floor.switches_per_trip:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
