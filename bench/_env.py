"""What the results were measured on: machine, versions, load."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = ["environment", "load_average", "steal_ticks"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return float("nan")


def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def git_revision() -> str:
    """Short commit of the checkout, with ``+dirty`` if liftbridge_sync/ has local changes."""
    root = Path(__file__).resolve().parent.parent

    def git(*argv: str) -> str:
        return subprocess.run(
            ["git", *argv], cwd=root, capture_output=True, text=True, check=False
        ).stdout.strip()

    revision = git("rev-parse", "--short", "HEAD") or "unknown"
    return revision + ("+dirty" if git("status", "--porcelain", "liftbridge_sync") else "")


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def steal_ticks() -> int:
    """Cumulative steal time of all CPUs (``/proc/stat``, clock ticks)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        return int(fields[8])
    except (OSError, IndexError, ValueError):
        return 0


def environment(extra: dict[str, Any]) -> dict[str, Any]:
    """Date, machine and versions, merged with ``extra``."""
    import liftbridge_sync

    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "ram_gib": _ram_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "grpcio": _pkg("grpcio"),
        "protobuf": _pkg("protobuf"),
        "liftbridge_sync": f"{liftbridge_sync.__version__} (git {git_revision()})",
        "load_average_start": load_average(),
    }
    info.update(extra)
    return info
