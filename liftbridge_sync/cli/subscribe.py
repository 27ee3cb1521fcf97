"""``subscribe``: print a stream's messages, from a start to a stop position or forever."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Generator, Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click

from liftbridge_sync import ConfigurationError, StartAt, StopAt, tail
from liftbridge_sync.cli.app import PARTITION, cli, refuse_empty, settings_of
from liftbridge_sync.cli.context import open_client
from liftbridge_sync.cli.errors import PipeClosed
from liftbridge_sync.cli.output import FORMATS, Output, format_message
from liftbridge_sync.cli.positions import START_HELP, STOP_HELP, parse_start, parse_stop
from liftbridge_sync.positions import StartKind, StopKind

if TYPE_CHECKING:  # annotations only: the client loads when the command opens one
    from liftbridge_sync import Client, Message, StreamSubscription, Subscription

__all__ = ["subscribe"]


#: Seconds between the output watcher's checks that the command still follows.
_WATCH_SLICE = 0.5


class _OutputGone(BaseException):
    """Raised in the main thread when the reader of a followed output has gone.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that the subscription code it
    comes out of cleans up and lets it through.
    """


def _raise_output_gone(signum: int, frame: FrameType | None) -> None:
    raise _OutputGone()


@contextlib.contextmanager
def _end_when_output_closes(follow: bool) -> Iterator[None]:
    """With ``--follow`` into a pipe, end the command (exit 141) as soon as the pipe's
    reader goes away, as ``tail -f`` does, not at the next message's write: on a quiet
    stream ``subscribe --follow | head -n 5`` waited for a sixth message, maybe forever.

    A thread (``liftbridge-cli-output-watch``) polls the pipe, and on its error sends
    SIGUSR1 to the main thread, whose handler raises there: a real signal, as a wait
    without a timeout (a whole-stream subscription's) ends only for one.
    """
    fd = sys.stdout.fileno()
    if (
        not follow
        or threading.current_thread() is not threading.main_thread()
        or not stat.S_ISFIFO(os.fstat(fd).st_mode)
    ):
        yield
        return
    previous = signal.signal(signal.SIGUSR1, _raise_output_gone)
    main = threading.get_ident()
    done = threading.Event()

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR, reported for a pipe without a reader, is implied
        while not done.is_set():
            if poller.poll(_WATCH_SLICE * 1000):
                signal.pthread_kill(main, signal.SIGUSR1)
                return

    watcher = threading.Thread(target=watch, name="liftbridge-cli-output-watch", daemon=True)
    watcher.start()
    try:
        yield
    except _OutputGone:
        raise PipeClosed() from None
    finally:
        done.set()
        watcher.join()
        signal.signal(signal.SIGUSR1, previous)


def _template(text: str | None, fmt: str) -> tail.Template | None:
    if text is None:
        return None
    if fmt != "plain":
        raise click.UsageError("give --format or --output, not both")
    try:
        return tail.Template(text)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None


def _last(text: str | None) -> int | None:
    try:
        return tail.parse_last(text or "")
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--start") from None


def _last_messages(
    client: Client, stream: str, partition: int | None, count: int, follow: bool, resume: bool
) -> Generator[Message, None, None]:
    """The messages among the newest ``count`` offsets, partition by partition.

    On a compacted stream some of those offsets may be gone, so fewer may come.
    """
    if partition is None:
        info = client.fetch_metadata(stream).streams.get(stream)
        partitions = sorted(info.partitions) if info is not None else [0]
    else:
        partitions = [partition]
    for pid in partitions:
        newest = client.fetch_partition_metadata(stream, pid).newest_offset
        start = StartAt.offset(max(0, newest - count + 1)) if newest >= 0 else StartAt.earliest()
        if newest < 0 and not follow:
            continue  # an empty partition has no last messages
        stop = None if follow else StopAt.latest()
        with client.subscribe(stream, partition=pid, start=start, stop=stop, resume=resume) as sub:
            yield from sub


@cli.command()
@click.argument("stream")
@click.option("-P", "--partition", type=PARTITION, help="One partition (default: all).")
@click.option("-s", "--start", callback=refuse_empty("the earliest", blank=True), help=START_HELP)
@click.option("-e", "--stop", callback=refuse_empty("the latest", blank=True), help=STOP_HELP)
@click.option("-F", "--follow", is_flag=True, help="Keep waiting for new messages.")
@click.option("-n", "--count", type=click.IntRange(min=1), help="Exit after COUNT messages.")
@click.option(
    "--last",
    "last",
    type=click.IntRange(min=1),
    help="Start at the newest N offsets of each partition (same as --start last:N).",
)
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(FORMATS),
    default="plain",
    show_default=True,
    help="plain: the value and a newline; json: one JSON object per line; raw: value bytes only.",
)
@click.option(
    "-f",
    "--format",
    "template",
    callback=refuse_empty("the default format", blank=True),
    help=tail.TEMPLATE_HELP,
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
    last: int | None,
    fmt: str,
    template: str | None,
    resume: bool,
) -> None:
    """Print messages of STREAM.

    Without --follow it reads from the earliest message to the latest one present
    now, and exits. With --last N (or --start last:N) it prints the messages among the
    newest N offsets of each partition, one partition after another.
    """
    if follow and stop:
        raise click.UsageError("give --follow or --stop, not both")
    if last is not None and start is not None:
        raise click.UsageError("give --last or --start, not both")
    last = last if last is not None else _last(start)
    if last is not None and stop:
        raise click.UsageError("--last ends at the latest message; it takes no --stop")
    if last is not None and follow and partition is None:
        raise click.UsageError("--last with --follow needs one partition (-P)")
    render = _template(template, fmt)
    start_at = parse_start(start or ("new" if follow else "earliest")) if last is None else None
    stop_at = None if follow or last is not None else parse_stop(stop or "latest")
    if (
        start_at is not None
        and stop_at is not None
        and start_at.kind is StartKind.OFFSET
        and stop_at.kind is StopKind.OFFSET
        and start_at.at_offset > stop_at.at_offset
    ):
        # The library reads such a range as empty; typed in a shell, it is a mistake.
        raise click.UsageError(
            f"--start offset {start_at.at_offset} is after --stop offset "
            f"{stop_at.at_offset} (the stop offset is read too)"
        )
    out = Output()
    seen = 0
    with _end_when_output_closes(follow), open_client(settings_of(ctx)) as client:
        messages: Generator[Message, None, None]
        if last is not None:
            messages = _last_messages(client, stream, partition, last, follow, resume)
        else:
            messages = _messages(client, stream, partition, start_at, stop_at, resume)
        with contextlib.closing(messages):  # ends the subscription before the client
            for message in messages:
                out.write(render.render(message) if render else format_message(message, fmt))
                if follow:
                    out.flush()
                seen += 1
                if count is not None and seen >= count:
                    break
    out.flush()


def _messages(
    client: Client,
    stream: str,
    partition: int | None,
    start: StartAt | None,
    stop: StopAt | None,
    resume: bool,
) -> Generator[Message, None, None]:
    sub: Subscription | StreamSubscription
    if partition is None:
        sub = client.subscribe_stream(stream, start=start, stop=stop, resume=resume)
    else:
        sub = client.subscribe(stream, partition=partition, start=start, stop=stop, resume=resume)
    with sub:
        yield from sub
