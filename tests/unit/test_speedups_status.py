"""``speedups_active()``, the fallback's DEBUG line, and which install the suite tests."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import liftbridge_sync
import liftbridge_sync.testing.plugin
from liftbridge_sync._wire import speedups

ROOT = Path(__file__).resolve().parents[2]

# Builds two clients (no connection is made) with DEBUG logging on stdout.
TWO_CLIENTS = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s|%(message)s")
    import liftbridge_sync
    for _ in range(2):
        liftbridge_sync.Client("127.0.0.1:1").close()
    print("active", liftbridge_sync.speedups_active())
    """
)


def _run(env_update: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "LIFTBRIDGE_SYNC_NO_SPEEDUPS"}
    env.update(env_update)
    result = subprocess.run(
        [sys.executable, "-c", TWO_CLIENTS],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_speedups_active_is_public_and_tells_the_truth() -> None:
    assert "speedups_active" in liftbridge_sync.__all__
    assert liftbridge_sync.speedups_active() is speedups.ACTIVE
    # ACTIVE means the C functions are the ones in use, not the Python fallbacks.
    assert (speedups.scan_acks is not None) is speedups.ACTIVE
    assert (speedups.INACTIVE_REASON == "") is speedups.ACTIVE


def test_disabled_speedups_log_one_debug_line_at_the_first_client() -> None:
    lines = _run({"LIFTBRIDGE_SYNC_NO_SPEEDUPS": "1"})
    assert lines[-1] == "active False"
    notes = [line for line in lines if line.startswith("liftbridge_sync.speedups|")]
    assert len(notes) == 1, lines
    assert "inactive (disabled by LIFTBRIDGE_SYNC_NO_SPEEDUPS)" in notes[0]
    assert "pure-Python fallback" in notes[0]


def test_the_debug_line_appears_only_when_the_fallback_runs() -> None:
    lines = _run({})
    notes = [line for line in lines if line.startswith("liftbridge_sync.speedups|")]
    if lines[-1] == "active True":
        assert notes == []
    else:
        assert lines[-1] == "active False" and len(notes) == 1
        assert "extension not built" in notes[0]


def test_the_suite_tests_the_install_it_means_to() -> None:
    """``make test`` sets LIFTBRIDGE_SYNC_EXPECT_INSTALLED=1: the wheel, not the checkout."""
    modules = [liftbridge_sync, liftbridge_sync.testing.plugin]
    if speedups.ACTIVE:
        from liftbridge_sync import _speedups

        modules.append(_speedups)
    files = [Path(m.__file__ or "").resolve() for m in modules]
    if os.environ.get("LIFTBRIDGE_SYNC_EXPECT_INSTALLED") == "1":
        site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
        for file in files:
            assert any(file.is_relative_to(s) for s in site), file
            assert not file.is_relative_to(ROOT / "liftbridge_sync"), file
    else:  # the editable install of `make venv`: the checkout itself
        for file in files:
            assert file.is_relative_to(ROOT / "liftbridge_sync"), file
