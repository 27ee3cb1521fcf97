"""Entry point: run the click group, map failures to exit codes and one-line errors."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

import click

from liftbridge_sync import LiftbridgeError
from liftbridge_sync.cli import admin, bench, metadata, publish, subscribe  # noqa: F401 - commands
from liftbridge_sync.cli.app import cli
from liftbridge_sync.cli.errors import (
    CommandFailed,
    ExitCode,
    PipeClosed,
    Terminated,
    exit_code_for,
)
from liftbridge_sync.cli.output import silence_stdout, stand_in_for_closed_stdio

__all__ = ["main"]

# rich loads where a command draws a table or a bar, not at start; a missing rich is
# found here all the same, so that liftbridge_sync.__main__ names the extra to install
# instead of a traceback half-way through a command.
if importlib.util.find_spec("rich") is None:
    raise ModuleNotFoundError("No module named 'rich'", name="rich")


def _debug(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("LIFTBRIDGE_DEBUG", "") not in ("", "0")


def _fail(message: str, code: int, debug: bool = False) -> int:
    if debug:
        # The traceback is extra information; the exit code stays the documented one.
        traceback.print_exc()
    click.echo(f"liftbridge-sync: error: {message}", err=True)
    return code


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextmanager
def _sigterm_as_exception() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread while the command runs.

    Its default action ends the process on the spot: no flush of what is printed, no
    close of subscriptions and client, exit 143 without a word.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stopped(message: str, code: ExitCode, exc: BaseException) -> int:
    # What was printed before the signal still reaches the reader.
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    # A command may say how far it got (publish); click wraps Ctrl-C in Abort.
    signalled = exc.__cause__ if isinstance(exc, click.exceptions.Abort) else exc
    detail = str(signalled) if signalled is not None else ""
    click.echo(f"liftbridge-sync: {message}{': ' + detail if detail else ''}", err=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``liftbridge-sync`` with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Errors print one line on stderr (after a traceback under ``--debug``); the exit code
    is the same with or without ``--debug``. SIGTERM stops a command as Ctrl-C does
    (output flushed, subscriptions and client closed), with exit code 143.

    Not thread-safe: run it from the main thread of a process.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    replaced = stand_in_for_closed_stdio()
    try:
        with _sigterm_as_exception():
            return _main(args)
    finally:
        for name, previous in replaced:
            setattr(sys, name, previous)


def _main(args: list[str]) -> int:
    debug = _debug(args)
    try:
        try:
            result = cli.main(args=args, prog_name="liftbridge-sync", standalone_mode=False)
            sys.stdout.flush()
        except BrokenPipeError:
            raise PipeClosed() from None
        return result if isinstance(result, int) else ExitCode.OK
    except PipeClosed:
        silence_stdout()
        return ExitCode.BROKEN_PIPE
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        # Ctrl-C is the user's choice, not an error.
        return _stopped("interrupted", ExitCode.INTERRUPTED, exc)
    except Terminated as exc:
        return _stopped("terminated", ExitCode.TERMINATED, exc)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except CommandFailed as exc:
        return _fail(str(exc), exc.code, debug)
    except LiftbridgeError as exc:
        return _fail(str(exc), exit_code_for(exc), debug)
    except OSError as exc:
        return _fail(str(exc), ExitCode.ERROR, debug)
