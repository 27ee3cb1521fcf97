"""Pure-stdlib statistics and result records shared by the orchestrator and the workers.

Workers may run in a foreign virtualenv (gufo): keep this module free of third-party
imports and of any import of :mod:`liftbridge_sync`.
"""

from __future__ import annotations

import array
import math
import os
import resource
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "context_switches",
    "cpu_seconds",
    "load_latencies",
    "percentile",
    "proc_cpu_seconds",
    "save_latencies",
    "spread",
    "summarize_latencies",
]


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank ``p``-th percentile (0 < p <= 100) of an ascending sequence.

    The Go programs in ``bench/go`` use the same definition.
    """
    if not sorted_values:
        return math.nan
    rank = min(max(math.ceil(p / 100 * len(sorted_values)), 1), len(sorted_values))
    return float(sorted_values[rank - 1])


def summarize_latencies(latencies_ns: Sequence[int]) -> dict[str, float]:
    """p50, p99 and max of per-message latencies given in nanoseconds, in microseconds."""
    ordered = sorted(latencies_ns)
    return {
        "latency_p50_us": percentile(ordered, 50) / 1000,
        "latency_p99_us": percentile(ordered, 99) / 1000,
        "latency_max_us": (ordered[-1] / 1000) if ordered else math.nan,
    }


def save_latencies(path: str | Path, latencies_ns: Sequence[int]) -> None:
    """Write nanosecond latencies as raw native int64 (a worker's side channel)."""
    with open(path, "wb") as out:
        array.array("q", latencies_ns).tofile(out)


def load_latencies(path: str | Path) -> array.array[int]:
    """Read what :func:`save_latencies` wrote."""
    values: array.array[int] = array.array("q")
    with open(path, "rb") as src:
        values.frombytes(src.read())
    return values


def cpu_seconds() -> tuple[float, float]:
    """User and system CPU seconds of this process (all threads) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def context_switches() -> int:
    """Voluntary plus involuntary context switches of this process (all threads) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of process ``pid`` from ``/proc/<pid>/stat``, or None if gone."""
    return stat_cpu_seconds(f"/proc/{pid}/stat")


def stat_cpu_seconds(path: str) -> float | None:
    """utime + stime from a ``stat`` file of ``/proc`` (a process's, or a thread's under
    ``/proc/<pid>/task/``), or None if it is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    # The command name may contain spaces; fields after it start at ") ".
    fields = text[text.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min and max of ``values`` (NaNs dropped); empty -> NaNs."""
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {
        "median": statistics.median(clean),
        "min": min(clean),
        "max": max(clean),
        "n": len(clean),
    }
