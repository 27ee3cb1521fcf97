"""The Go side: build and run ``bench/go`` (go-liftbridge/v2 v2.4.0)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

__all__ = ["GO_DIR", "binary", "build", "go_liftbridge_version", "go_version"]

GO_DIR = Path(__file__).resolve().parent / "go"
_PROGRAMS = ("producer", "consumer")


def bin_dir() -> Path:
    """Where the binaries go: ``<liftbridge-sync cache>/bench/bin`` (never into git)."""
    from liftbridge_sync.testing import cache_dir

    return cache_dir() / "bench" / "bin"


def binary(name: str) -> Path:
    """Path of a built program (``producer`` or ``consumer``)."""
    return bin_dir() / name


def _sources() -> list[Path]:
    return [p for p in GO_DIR.rglob("*") if p.suffix == ".go" or p.name in ("go.mod", "go.sum")]


def build(force: bool = False) -> None:
    """Build both programs unless they are newer than every source file."""
    targets = [binary(name) for name in _PROGRAMS]
    newest = max(p.stat().st_mtime for p in _sources())
    if not force and all(t.exists() and t.stat().st_mtime >= newest for t in targets):
        return
    bin_dir().mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run(
        ["go", "build", "-o", str(bin_dir()) + "/", *(f"./{name}" for name in _PROGRAMS)],
        cwd=GO_DIR,
        env=env,
        check=True,
    )


def go_version() -> str:
    """``go version`` output, e.g. ``go1.26.8 linux/amd64``."""
    out = subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout
    return out.strip().removeprefix("go version ")


def go_liftbridge_version() -> str:
    """The go-liftbridge/v2 version required by ``bench/go/go.mod``."""
    match = re.search(r"go-liftbridge/v2 (v\S+)", (GO_DIR / "go.mod").read_text())
    return match.group(1) if match else "unknown"
