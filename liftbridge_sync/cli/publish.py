"""``publish``: messages from arguments, standard input lines or a file."""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

import click

from liftbridge_sync import (
    Ack,
    AckPolicy,
    ByKey,
    Client,
    LiftbridgeError,
    Partitioner,
    RoundRobin,
)
from liftbridge_sync.cli.app import cli, settings_of
from liftbridge_sync.cli.context import open_client
from liftbridge_sync.cli.errors import CommandFailed, ExitCode, PipeClosed, exit_code_for
from liftbridge_sync.cli.output import Output
from liftbridge_sync.cli.progress import Progress, Silent, progress

__all__ = ["publish"]

_POLICIES = {"leader": AckPolicy.LEADER, "all": AckPolicy.ALL, "none": AckPolicy.NONE}


def _headers(values: tuple[str, ...]) -> dict[str, bytes]:
    headers: dict[str, bytes] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"header {item!r} must be NAME=VALUE", param_hint="--header")
        headers[name] = value.encode("utf-8")
    return headers


def _lines(handle: BinaryIO, bar: Progress) -> Iterator[bytes]:
    for line in handle:
        bar.advance(len(line))
        yield line[:-1] if line.endswith(b"\n") else line


def _partitioner(name: str | None) -> Partitioner | None:
    if name == "key":
        return ByKey()
    if name == "round-robin":
        return RoundRobin()
    return None


class _Tracker:
    """Futures in submission order; reports acks in order and keeps the first failure.

    Not thread-safe: used by the command's main thread only.
    """

    def __init__(self, print_acks: bool) -> None:
        self.pending: collections.deque[concurrent.futures.Future[Ack | None]] = collections.deque()
        self.out = Output() if print_acks else None
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        #: The reader of the printed acks went away (``| head``): input is no longer read.
        self.output_closed = False

    def add(self, future: concurrent.futures.Future[Ack | None]) -> None:
        self.sent += 1
        self.pending.append(future)
        while self.pending and self.pending[0].done():
            self._settle(self.pending.popleft())

    def drain(self) -> None:
        while self.pending:
            self._settle(self.pending.popleft(), stop_on_closed_output=False)
        if self.out is not None:
            try:
                self.out.flush()
            except PipeClosed:
                self._close_output()

    def _close_output(self) -> None:
        self.out = None
        self.output_closed = True

    def _settle(
        self, future: concurrent.futures.Future[Ack | None], stop_on_closed_output: bool = True
    ) -> None:
        error = future.exception()
        if error is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error
            return
        self.acked += 1
        ack = future.result()
        if self.out is not None and ack is not None:
            record = {"stream": ack.stream, "partition": ack.partition, "offset": ack.offset}
            try:
                self.out.write(json.dumps(record).encode() + b"\n")
            except PipeClosed:
                # Every message sent so far is still settled (drain); only reading more
                # input stops, and the summary says how far it got.
                self._close_output()
                if stop_on_closed_output:
                    raise


@cli.command()
@click.argument("stream")
@click.argument("values", nargs=-1)
@click.option(
    "-f",
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="Publish each line of this file ('-': standard input, the default without VALUES).",
)
@click.option("-k", "--key", help="Key of every message.")
@click.option(
    "-K",
    "--key-separator",
    help="Split each line at the first SEP into key and value.",
)
@click.option("-H", "--header", "headers", multiple=True, help="NAME=VALUE; repeatable.")
@click.option("-P", "--partition", type=click.IntRange(min=0), help="Target partition.")
@click.option(
    "--partitioner",
    type=click.Choice(["key", "round-robin"]),
    help="Choose the partition by key hash or in turn.",
)
@click.option(
    "--ack-policy",
    type=click.Choice(list(_POLICIES)),
    default="leader",
    show_default=True,
)
@click.option("--print-acks", is_flag=True, help="Print one JSON line per ack, in order.")
@click.pass_context
def publish(
    ctx: click.Context,
    stream: str,
    values: tuple[str, ...],
    path: str | None,
    key: str | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    partition: int | None,
    partitioner: str | None,
    ack_policy: str,
    print_acks: bool,
) -> None:
    """Publish VALUES to STREAM, or one message per line of a file or standard input."""
    if values and path:
        raise click.UsageError("give VALUES or --file, not both")
    if partition is not None and partitioner:
        raise click.UsageError("give --partition or --partitioner, not both")
    if key is not None and key_separator:
        raise click.UsageError("give --key or --key-separator, not both")
    if print_acks and ack_policy == "none":
        raise click.UsageError("--print-acks needs acks: use --ack-policy leader or all")
    header_map = _headers(headers)
    tracker = _Tracker(print_acks)
    with open_client(settings_of(ctx)) as client:
        try:
            if values:
                messages: Iterator[bytes] = (v.encode("utf-8") for v in values)
                _send(
                    client,
                    stream,
                    messages,
                    tracker,
                    key,
                    key_separator,
                    header_map,
                    partition,
                    _partitioner(partitioner),
                    _POLICIES[ack_policy],
                )
            else:
                _publish_file(
                    client,
                    stream,
                    path or "-",
                    tracker,
                    key,
                    key_separator,
                    header_map,
                    partition,
                    _partitioner(partitioner),
                    _POLICIES[ack_policy],
                )
        except PipeClosed:
            pass  # summarised below, once every message sent is settled
        finally:
            tracker.drain()
    if tracker.output_closed:
        click.echo(
            f"liftbridge-sync: output closed: stopped reading input after {tracker.sent} "
            f"message{'' if tracker.sent == 1 else 's'}; {tracker.acked} published, "
            f"{tracker.failed} failed",
            err=True,
        )
        raise PipeClosed()
    if tracker.first_error is None:
        noun = "message" if tracker.acked == 1 else "messages"
        click.echo(f"published {tracker.acked} {noun} to {stream}", err=True)
    else:
        error = tracker.first_error
        code = (
            exit_code_for(error) if isinstance(error, LiftbridgeError) else ExitCode.PUBLISH_FAILED
        )
        raise CommandFailed(
            f"{tracker.failed} of {tracker.sent} messages failed, the first with: {error}",
            code if code is not ExitCode.ERROR else ExitCode.PUBLISH_FAILED,
        ) from error


def _publish_file(
    client: Client,
    stream: str,
    path: str,
    tracker: _Tracker,
    key: str | None,
    key_separator: str | None,
    headers: dict[str, bytes],
    partition: int | None,
    partitioner: Partitioner | None,
    policy: AckPolicy,
) -> None:
    if path == "-":
        _send(
            client,
            stream,
            _lines(sys.stdin.buffer, Silent()),
            tracker,
            key,
            key_separator,
            headers,
            partition,
            partitioner,
            policy,
        )
        return
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise click.FileError(path, hint=exc.strerror or str(exc)) from None
    with (
        handle,
        progress(f"publishing {os.path.basename(path)}", os.fstat(handle.fileno()).st_size) as bar,
    ):
        _send(
            client,
            stream,
            _lines(handle, bar),
            tracker,
            key,
            key_separator,
            headers,
            partition,
            partitioner,
            policy,
        )


def _send(
    client: Client,
    stream: str,
    messages: Iterator[bytes],
    tracker: _Tracker,
    key: str | None,
    key_separator: str | None,
    headers: dict[str, bytes],
    partition: int | None,
    partitioner: Partitioner | None,
    policy: AckPolicy,
) -> None:
    fixed_key = key.encode("utf-8") if key is not None else None
    separator = key_separator.encode("utf-8") if key_separator else None
    for value in messages:
        message_key = fixed_key
        if separator is not None:
            head, sep, tail = value.partition(separator)
            message_key, value = (head, tail) if sep else (None, value)
        tracker.add(
            client.publish_async(
                stream,
                value,
                key=message_key,
                partition=partition,
                partitioner=partitioner,
                headers=headers or None,
                ack_policy=policy,
            )
        )
        if tracker.first_error is not None:
            return
