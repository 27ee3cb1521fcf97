"""Entry point: run the click group, map failures to exit codes and one-line errors."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

import click

from liftbridge_sync import LiftbridgeError
from liftbridge_sync.cli import admin, bench, metadata, publish, subscribe  # noqa: F401 - commands
from liftbridge_sync.cli.app import cli
from liftbridge_sync.cli.errors import CommandFailed, ExitCode, PipeClosed, exit_code_for

__all__ = ["main"]


def _debug(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("LIFTBRIDGE_DEBUG", "") not in ("", "0")


def _fail(message: str, code: int, debug: bool = False) -> int:
    if debug:
        # The traceback is extra information; the exit code stays the documented one.
        traceback.print_exc()
    click.echo(f"liftbridge-sync: error: {message}", err=True)
    return code


def _silence_stdout() -> None:
    # Further writes (including the interpreter's final flush) go nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``liftbridge-sync`` with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Errors print one line on stderr (after a traceback under ``--debug``); the exit code
    is the same with or without ``--debug``.

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
    except (click.exceptions.Abort, KeyboardInterrupt):
        # Ctrl-C is the user's choice, not an error.
        click.echo("liftbridge-sync: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except CommandFailed as exc:
        return _fail(str(exc), exc.code, debug)
    except LiftbridgeError as exc:
        return _fail(str(exc), exit_code_for(exc), debug)
    except OSError as exc:
        return _fail(str(exc), ExitCode.ERROR, debug)
