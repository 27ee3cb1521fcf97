"""The ``liftbridge-sync`` click group and its global options."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from typing import Any

import click

from liftbridge_sync import ConfigurationError, __version__, speedups_active
from liftbridge_sync._extension import INACTIVE_REASON
from liftbridge_sync._wire.validate import INT32_MAX
from liftbridge_sync.cli.context import CliSettings
from liftbridge_sync.cli.errors import CommandFailed, ExitCode, PipeClosed

__all__ = ["PARTITION", "cli", "refuse_empty"]

#: A partition number: the wire holds an int32, and click then names the option when
#: one is out of range (the client's error named its own parameter, 'partition').
PARTITION = click.IntRange(min=0, max=INT32_MAX)


def refuse_empty(
    left_out: str, *, blank: bool = False
) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """A click callback that refuses an empty option value.

    ``-s "$UNSET"`` in a script is a mistake, not a request for what leaving the option
    out gives; click would pass the empty string on as a value.

    Args:
        left_out: What leaving the option out gives, for the message ("NAME").
        blank: Refuse a value of only spaces too (for values no space can start).

    Returns:
        The callback, to pass as ``callback=`` to ``click.option``.
    """

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and not (value.strip() if blank else value):
            raise click.BadParameter(f"an empty value: leave the option out for {left_out}")
        return value

    return check


def _version_message() -> str:
    # Says whether this install runs the C speedups: a source install without a C
    # compiler falls back silently otherwise.
    if speedups_active():
        return "%(prog)s %(version)s (C speedups active)"
    reason = INACTIVE_REASON.replace("%", "%%")  # click %-formats the message
    return f"%(prog)s %(version)s (C speedups inactive: {reason}; pure-Python fallback)"


_ADDRESSES_ENV = "LIFTBRIDGE_ADDRESSES"

#: The longest --timeout (11.6 days): the client's retry policy takes at most 2e6 s.
_MAX_TIMEOUT = 1_000_000.0


def _finite_timeout(value: float) -> float:
    # FloatRange lets NaN through (every comparison with it is false).
    if not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", param_hint="--timeout")
    return value


def _addresses(
    values: tuple[str, ...], source: click.core.ParameterSource | None
) -> tuple[str, ...]:
    if not values:
        if _ADDRESSES_ENV in os.environ and source is not click.core.ParameterSource.COMMANDLINE:
            # click takes an empty or blank variable for an unset one; it is a mistake
            # (export LIFTBRIDGE_ADDRESSES=$UNSET), not a request for localhost.
            raise CommandFailed(f"{_ADDRESSES_ENV} is set but names no broker", ExitCode.USAGE)
        return ("localhost:9292",)
    items = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if not items:
        # An empty -a (or LIFTBRIDGE_ADDRESSES=",") is a mistake, not a request for localhost.
        where = "--address" if source is click.core.ParameterSource.COMMANDLINE else _ADDRESSES_ENV
        raise CommandFailed(f"{where}: no broker address given", ExitCode.USAGE)
    return tuple(items)


class _Group(click.Group):
    """The root group: a write into a closed standard output ends in :class:`PipeClosed`.

    click's ``main`` turns an EPIPE into a bare exit 1, with nothing on stderr, even
    outside standalone mode: for its own help and version text and for what a command
    prints with ``click.echo``. It never sees this exception, so the exit code is 141.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:  # --help, --version
            raise PipeClosed() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # a command's click.echo, a subcommand's --help
            raise PipeClosed() from None


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "-a",
    "--address",
    "addresses",
    multiple=True,
    envvar=_ADDRESSES_ENV,
    help="Seed broker host:port; repeat or comma-separate (env LIFTBRIDGE_ADDRESSES; "
    "default localhost:9292).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=_MAX_TIMEOUT),
    callback=lambda ctx, param, value: _finite_timeout(value),
    default=5.0,
    show_default=True,
    envvar="LIFTBRIDGE_TIMEOUT",
    help="Seconds for each request; a broker that cannot be reached is retried until they "
    "have passed (then exit 5).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logging.")
@click.version_option(
    __version__, "-V", "--version", prog_name="liftbridge-sync", message=_version_message()
)
@click.pass_context
def cli(ctx: click.Context, addresses: tuple[str, ...], timeout: float, debug: bool) -> None:
    """Manage and use Liftbridge streams from the shell.

    Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 exists, 5 broker unavailable,
    6 publish failed, 130 interrupted (Ctrl-C), 141 output pipe closed, 143 terminated
    (SIGTERM).
    """
    if isinstance(addresses, str):  # an envvar with multiple=True may arrive split or not
        addresses = (addresses,)
    source = ctx.get_parameter_source("addresses")
    settings = CliSettings(addresses=_addresses(addresses, source), timeout=timeout, debug=debug)
    state = ctx.ensure_object(dict)
    state["settings"] = settings
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")
    else:
        _show_warnings()
    try:
        settings.client_options()
    except ConfigurationError as exc:
        raise CommandFailed(f"--address: {exc}", ExitCode.USAGE) from None


def _show_warnings() -> None:
    """Print the subscriptions' warnings on stderr, one line each: the package's
    ``NullHandler`` hides them from Python's last-resort handler, and they say what a
    read did instead of what was asked (a cursor past the end read from the start,
    messages the server sent again and were skipped, a lost stream resubscribed).

    Not the other loggers' (each failed attempt of a retried call or a publish stream
    logs one): a command that fails says why itself, on its one line."""
    logger = logging.getLogger("liftbridge_sync.subscription")
    if any(getattr(h, "_liftbridge_cli", False) for h in logger.handlers):
        return  # once per process
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("liftbridge-sync: warning: %(message)s"))
    handler._liftbridge_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)


def settings_of(ctx: click.Context) -> CliSettings:
    """The :class:`CliSettings` of the running command.

    Thread-safe: reads the click context.
    """
    settings = ctx.find_root().ensure_object(dict)["settings"]
    assert isinstance(settings, CliSettings)
    return settings
