"""``speedups_active()``, the fallback's DEBUG line, and which install the suite tests."""

from __future__ import annotations

import os
import shutil
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

RUN_VERSION = textwrap.dedent(
    """
    import runpy
    sys.argv = ["liftbridge-sync", "--version"]
    runpy.run_module("liftbridge_sync", run_name="__main__")
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


def test_an_install_without_the_extension_says_so(tmp_path: Path) -> None:
    """What a source install on a machine without a C compiler gets: the same package
    without ``_speedups*.so``. It works, and says why it is slower where users look."""
    package = Path(liftbridge_sync.__file__).parent
    shutil.copytree(package, tmp_path / "liftbridge_sync", ignore=shutil.ignore_patterns("*.so"))
    env = {k: v for k, v in os.environ.items() if k != "LIFTBRIDGE_SYNC_NO_SPEEDUPS"}
    env["PYTHONPATH"] = str(tmp_path)
    # The editable install of `make venv` maps liftbridge_sync.* to the checkout by name
    # from a meta-path finder; without it the copy is what imports, as in a real install.
    unhook = "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if "
    unhook += "'__editable__' not in getattr(f, '__module__', '')]\n"
    script = unhook + TWO_CLIENTS + "print(liftbridge_sync.__file__)\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the checkout's liftbridge_sync
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == str(tmp_path / "liftbridge_sync" / "__init__.py")
    assert lines[-2] == "active False"
    notes = [line for line in lines if line.startswith("liftbridge_sync.speedups|")]
    assert len(notes) == 1, lines
    assert (
        "inactive (extension not built (installed from source without a C compiler))" in (notes[0])
    )
    version = subprocess.run(
        [sys.executable, "-c", unhook + RUN_VERSION],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert version.returncode == 0, version.stderr
    assert "C speedups inactive: extension not built" in version.stdout


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
