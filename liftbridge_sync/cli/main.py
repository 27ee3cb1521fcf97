"""Entry point: run the click group, map failures to exit codes and one-line errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from liftbridge_sync import LiftbridgeError
from liftbridge_sync.cli import admin, bench, metadata, publish, subscribe  # noqa: F401 - commands
from liftbridge_sync.cli.app import cli
from liftbridge_sync.cli.errors import CommandFailed, ExitCode, PipeClosed, exit_code_for

__all__ = ["main"]


def _debug(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("LIFTBRIDGE_DEBUG", "") not in ("", "0")


def _fail(message: str, code: int) -> int:
    click.echo(f"liftbridge-sync: error: {message}", err=True)
    return code


def _silence_stdout() -> None:
    # Further writes (including the interpreter's final flush) go nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``liftbridge-sync`` with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Errors print one line on stderr (with a traceback only under ``--debug``).

    Not thread-safe: run it from the main thread of a process.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = _debug(args)
    try:
        try:
            result = cli.main(args=args, prog_name="liftbridge-sync", standalone_mode=False)
            sys.stdout.flush()
        except BrokenPipeError:
            raise PipeClosed() from None
        return result if isinstance(result, int) else ExitCode.OK
    except PipeClosed:
        _silence_stdout()
        return ExitCode.BROKEN_PIPE
    except click.exceptions.Abort:
        return _fail("interrupted", ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        return _fail("interrupted", ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except CommandFailed as exc:
        if debug:
            raise
        return _fail(str(exc), exc.code)
    except LiftbridgeError as exc:
        if debug:
            raise
        return _fail(str(exc), exit_code_for(exc))
    except OSError as exc:
        if debug:
            raise
        return _fail(str(exc), ExitCode.ERROR)
