"""Exit codes of the ``liftbridge-sync`` command and the one-line error messages.

Scripts can rely on these codes; they are part of the command's interface.
"""

from __future__ import annotations

import enum

from liftbridge_sync import (
    BrokerUnavailableError,
    ConfigurationError,
    DeadlineExceededError,
    LiftbridgeError,
    NotFoundError,
    PublishError,
    StreamExistsError,
)

__all__ = ["CommandFailed", "ExitCode", "PipeClosed", "Terminated", "exit_code_for"]


class ExitCode(enum.IntEnum):
    """Process exit status of ``liftbridge-sync``.

    Immutable; safe to share between threads.
    """

    #: Success.
    OK = 0
    #: Any other failure (server error, read-only or paused partition, ...).
    ERROR = 1
    #: Bad command line or configuration (click's usage errors use 2 as well).
    USAGE = 2
    #: The stream, partition or cursor target does not exist.
    NOT_FOUND = 3
    #: The stream already exists (``create`` without ``--exist-ok``).
    EXISTS = 4
    #: No broker could be reached (bad address, refused connection, timeout).
    UNAVAILABLE = 5
    #: One or more messages could not be published.
    PUBLISH_FAILED = 6
    #: Interrupted by Ctrl-C (SIGINT).
    INTERRUPTED = 130
    #: The reader of standard output went away (e.g. ``| head``), as for SIGPIPE.
    BROKEN_PIPE = 141
    #: Stopped by SIGTERM (``kill``, a service manager, a CI timeout), as cleanly as by
    #: Ctrl-C: output flushed, subscriptions and the client closed.
    TERMINATED = 143


class PipeClosed(Exception):
    """Standard output was closed by its reader; raised instead of ``BrokenPipeError``.

    Immutable; safe to share between threads.
    """


class Terminated(BaseException):
    """Raised in the main thread when the process receives SIGTERM.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception``
    on the way takes it for an error; every ``finally`` and ``with`` still runs.

    Immutable; safe to share between threads.
    """


class CommandFailed(Exception):
    """A command failed: print ``message`` on one line and exit with ``code``.

    Immutable; safe to share between threads.
    """

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


def exit_code_for(error: LiftbridgeError) -> ExitCode:
    """The exit code for a client error.

    Thread-safe: a pure function.
    """
    if isinstance(error, NotFoundError):
        return ExitCode.NOT_FOUND
    if isinstance(error, StreamExistsError):
        return ExitCode.EXISTS
    if isinstance(error, BrokerUnavailableError | DeadlineExceededError):
        return ExitCode.UNAVAILABLE
    if isinstance(error, ConfigurationError):
        return ExitCode.USAGE
    if isinstance(error, PublishError):
        return ExitCode.PUBLISH_FAILED
    return ExitCode.ERROR
