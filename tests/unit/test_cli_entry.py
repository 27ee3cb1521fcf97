"""The ``liftbridge-sync`` console script and ``python -m liftbridge_sync`` without click."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest

import liftbridge_sync

# Hides click and rich as if the ``cli`` extra were not installed.
BLOCKER = textwrap.dedent(
    """
    import sys

    class HideCliExtra:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("click", "rich"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, HideCliExtra())
    """
)


def _run(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _assert_one_line_hint(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "pip install 'liftbridge-sync[cli]'" in lines[0]
    assert "click is missing" in lines[0]


def test_console_script_points_outside_the_cli_package() -> None:
    (script,) = entry_points(group="console_scripts", name="liftbridge-sync")
    assert script.value == "liftbridge_sync.__main__:main"


def test_console_script_without_the_cli_extra_prints_one_line() -> None:
    result = _run(
        """
        from importlib.metadata import entry_points
        (script,) = entry_points(group="console_scripts", name="liftbridge-sync")
        sys.argv = ["liftbridge-sync", "--version"]
        sys.exit(script.load()())
        """
    )
    _assert_one_line_hint(result)


def test_python_m_without_the_cli_extra_prints_one_line() -> None:
    result = _run(
        """
        import runpy
        sys.argv = ["liftbridge_sync", "--help"]
        runpy.run_module("liftbridge_sync", run_name="__main__")
        """
    )
    _assert_one_line_hint(result)


def test_a_broken_install_is_not_reported_as_a_missing_extra() -> None:
    """Only click/rich missing means "install the extra"; other import errors surface."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["liftbridge_sync.cli.app"] = None
        from liftbridge_sync.__main__ import main
        sys.exit(main())
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "liftbridge_sync.cli.app" in result.stderr
    assert "liftbridge-sync[cli]" not in result.stderr


@pytest.mark.parametrize("disabled", [False, True])
def test_version_says_whether_the_speedups_run(disabled: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LIFTBRIDGE_SYNC_NO_SPEEDUPS"}
    if disabled:
        env["LIFTBRIDGE_SYNC_NO_SPEEDUPS"] = "1"
    probe = "import liftbridge_sync; print(liftbridge_sync.speedups_active())"
    active = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    result = subprocess.run(
        [sys.executable, "-m", "liftbridge_sync", "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"liftbridge-sync {liftbridge_sync.__version__} (")
    if active == "True":
        assert "(C speedups active)" in result.stdout
    else:
        assert active == "False"
        assert "C speedups inactive" in result.stdout and "pure-Python fallback" in result.stdout
    if disabled:
        assert active == "False"
        assert "disabled by LIFTBRIDGE_SYNC_NO_SPEEDUPS" in result.stdout


def test_rich_alone_missing_is_reported_as_the_missing_extra() -> None:
    """rich loads only where a command draws; its absence still gives the one-line hint."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            BLOCKER.replace('("click", "rich")', '("rich",)')
            + textwrap.dedent(
                """
            from liftbridge_sync.__main__ import main
            sys.argv = ["liftbridge-sync", "--help"]
            sys.exit(main())
            """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "liftbridge-sync: the command line needs the 'cli' extra (rich is missing): "
        "pip install 'liftbridge-sync[cli]'"
    ]


@pytest.mark.parametrize("argv", [["--help"], ["publish", "--help"], ["subscribe", "--help"]])
def test_help_loads_no_grpc_protobuf_or_rich(argv: list[str]) -> None:
    """Parsing and help cost click alone: the client's transport and rich load when a
    command opens a client or draws a table."""
    script = textwrap.dedent(
        f"""
        import sys
        from importlib.metadata import entry_points
        (script,) = entry_points(group="console_scripts", name="liftbridge-sync")
        sys.argv = ["liftbridge-sync", *{argv!r}]
        try:
            code = script.load()()
        except SystemExit as exc:  # click's --help exits
            code = exc.code
        heavy = ("grpc", "google", "h2", "hpack", "tenacity", "rich")
        print(code, sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy)), file=sys.stderr)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert "Usage: liftbridge-sync" in result.stdout, result.stderr
    assert result.stderr.splitlines()[-1] == "0 []", result.stderr
