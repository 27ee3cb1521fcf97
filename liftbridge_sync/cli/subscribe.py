"""``subscribe``: print a stream's messages, from a start to a stop position or forever."""

from __future__ import annotations

import click

from liftbridge_sync import StreamSubscription, Subscription
from liftbridge_sync.cli.app import cli, settings_of
from liftbridge_sync.cli.context import open_client
from liftbridge_sync.cli.output import FORMATS, Output, format_message
from liftbridge_sync.cli.positions import START_HELP, STOP_HELP, parse_start, parse_stop

__all__ = ["subscribe"]


@cli.command()
@click.argument("stream")
@click.option("-P", "--partition", type=click.IntRange(min=0), help="One partition (default: all).")
@click.option("-s", "--start", help=START_HELP)
@click.option("-e", "--stop", help=STOP_HELP)
@click.option("-F", "--follow", is_flag=True, help="Keep waiting for new messages.")
@click.option("-n", "--count", type=click.IntRange(min=1), help="Exit after COUNT messages.")
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(FORMATS),
    default="plain",
    show_default=True,
    help="plain: the value and a newline; json: one JSON object per line; raw: value bytes only.",
)
@click.option("--resume", is_flag=True, help="Resume paused partitions.")
@click.pass_context
def subscribe(
    ctx: click.Context,
    stream: str,
    partition: int | None,
    start: str | None,
    stop: str | None,
    follow: bool,
    count: int | None,
    fmt: str,
    resume: bool,
) -> None:
    """Print messages of STREAM.

    Without --follow it reads from the earliest message to the latest one present
    now, and exits.
    """
    if follow and stop:
        raise click.UsageError("give --follow or --stop, not both")
    start_at = parse_start(start or ("new" if follow else "earliest"))
    stop_at = None if follow else parse_stop(stop or "latest")
    out = Output()
    seen = 0
    with open_client(settings_of(ctx)) as client:
        sub: Subscription | StreamSubscription
        if partition is None:
            sub = client.subscribe_stream(stream, start=start_at, stop=stop_at, resume=resume)
        else:
            sub = client.subscribe(
                stream, partition=partition, start=start_at, stop=stop_at, resume=resume
            )
        with sub:
            for message in sub:
                out.write(format_message(message, fmt))
                if follow:
                    out.flush()
                seen += 1
                if count is not None and seen >= count:
                    break
    out.flush()
