"""The gufo-liftbridge side: a separate virtualenv in the cache directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

__all__ = ["WORKER", "ensure_venv", "python", "versions"]

WORKER = Path(__file__).resolve().parent / "_gufo_worker.py"
PACKAGE = "gufo-liftbridge"


def venv_dir() -> Path:
    """``<liftbridge-sync cache>/bench/gufo-venv``."""
    from liftbridge_sync.testing import cache_dir

    return cache_dir() / "bench" / "gufo-venv"


def python() -> Path:
    """The gufo virtualenv's interpreter."""
    return venv_dir() / "bin" / "python"


def ensure_venv() -> Path:
    """Create the virtualenv and install gufo-liftbridge into it, once."""
    interpreter = python()
    probe = [str(interpreter), "-c", "import gufo.liftbridge.client"]
    if interpreter.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return interpreter
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir())], check=True)
    subprocess.run([str(interpreter), "-m", "pip", "install", "-q", PACKAGE], check=True)
    return interpreter


def versions() -> dict[str, str]:
    """Versions of gufo_liftbridge, grpcio and protobuf inside the gufo virtualenv."""
    out = subprocess.run(
        [str(python()), str(WORKER), "version"], capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(out))
