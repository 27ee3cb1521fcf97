"""Python's own floor for many threads that each wait for an answer (issue 27).

Run: ``python -m bench.thread_floor [--threads 1,2,8,64] [--seconds 3] [--gates
lock,gate]`` with any interpreter (with ``lock`` alone it imports nothing of the client;
``$(pyenv prefix 3.13)/bin/python -m bench.thread_floor`` measures 3.13).

N caller threads loop: queue a request, wake the answering thread, block on a lock of
their own. One answering thread takes everything queued and releases each caller's lock:
the least that ``publish()`` from N threads sharing one client must do in CPython (a
caller parks, is woken and takes the GIL back), with no encoding, no socket and no broker.
Prints round trips a second, the process's CPU (all threads) and context switches per
round trip. ``--gates`` names what the callers block on: ``lock``, a ``threading.Lock``
released by the answering thread with the GIL held; ``gate``, the client's C ``Gate``
(``liftbridge_sync/_speedups_gate.c``), opened with the GIL released.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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


class _LockGate:
    """A ``threading.Lock`` as a gate: held while closed, released with the GIL held."""

    __slots__ = ("wait", "open")

    def __init__(self) -> None:
        lock = _thread.allocate_lock()
        lock.acquire()
        self.wait = lock.acquire
        self.open = lock.release


def _gate_factory(name: str) -> Callable[[], Any]:
    if name == "lock":
        return _LockGate
    if name == "gate":
        from liftbridge_sync._wire import speedups

        if speedups.Gate is None:
            raise SystemExit("--gates gate: the C speedups are not built or are disabled")
        return speedups.Gate  # type: ignore[no-any-return]
    raise SystemExit(f"--gates: {name!r} is neither lock nor gate")


def measure(threads: int, seconds: float, gate: str = "lock") -> Floor:
    """Run ``threads`` callers against one answering thread for ``seconds``."""
    new_gate = _gate_factory(gate)
    queued: collections.deque[Any] = collections.deque()
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
                queued.popleft().open()

    def call(index: int) -> None:
        mine = new_gate()
        done = 0
        while not stopping.is_set():
            queued.append(mine)
            with wake:
                wake.notify()
            mine.wait()
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
    parser.add_argument("--gates", default="lock", help="lock, gate or both (lock,gate)")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}")
    print("| threads | gate | round trips/s | CPU µs/trip | context switches/trip |")
    print("|---|---|---|---|---|")
    for threads in (int(n) for n in args.threads.split(",")):
        for gate in args.gates.split(","):
            floor = measure(threads, args.seconds, gate)
            print(
                f"| {threads} | {gate} | {floor.rate:,.0f} | {floor.cpu_per_trip_us:.1f} | "
                f"{floor.switches_per_trip:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
