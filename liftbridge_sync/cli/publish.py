"""``publish``: messages from arguments, standard input lines or a file."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import click

from liftbridge_sync import (
    Ack,
    AckPolicy,
    ClientClosedError,
    LiftbridgeError,
    NoSuchStreamError,
    Partitioner,
    PartitionInfo,
    PublishError,
)
from liftbridge_sync._runtime.doorbell import Doorbell
from liftbridge_sync.cli.app import PARTITION, cli, refuse_empty, settings_of
from liftbridge_sync.cli.context import open_client
from liftbridge_sync.cli.errors import (
    CommandFailed,
    ExitCode,
    PipeClosed,
    Terminated,
    exit_code_for,
)
from liftbridge_sync.cli.output import Output, silence_stdout
from liftbridge_sync.cli.progress import Progress, Silent, progress
from liftbridge_sync.partitioners import PARTITIONER_NAMES, partitioner_named

if TYPE_CHECKING:  # annotations only: the client loads when a command opens one
    from liftbridge_sync import Client

__all__ = ["publish"]

_POLICIES = {"leader": AckPolicy.LEADER, "all": AckPolicy.ALL, "none": AckPolicy.NONE}


def _argv_bytes(text: str) -> bytes:
    """The bytes the shell passed: Python decodes arguments that are not UTF-8 with
    surrogate escapes, which ``str.encode("utf-8")`` refuses."""
    return os.fsencode(text)


def _headers(values: tuple[str, ...]) -> dict[str, bytes]:
    headers: dict[str, bytes] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"header {item!r} must be NAME=VALUE", param_hint="--header")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise click.BadParameter(
                f"header name {name!r} is not UTF-8 (the server's header names are text)",
                param_hint="--header",
            ) from None
        headers[name] = _argv_bytes(value)
    return headers


@dataclasses.dataclass(frozen=True)
class _Shape:
    """How input lines become messages: key, headers, target and line handling."""

    stream: str
    key: bytes | None
    key_separator: bytes | None
    headers: dict[str, bytes]
    partition: int | None
    partitioner: Partitioner | None
    policy: AckPolicy
    skip_empty: bool
    allow_unkeyed: bool


def _shown(data: bytes) -> str:
    """``data`` quoted for a message: as text, or as bytes when it is not UTF-8."""
    try:
        return repr(data.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(data)


def _lines(raw: Iterable[bytes], bar: Progress, shape: _Shape) -> Iterator[bytes]:
    for number, line in enumerate(raw, start=1):
        bar.advance(len(line))
        # A CRLF line ending (a file from Windows) is a line ending, not data.
        if line.endswith(b"\r\n"):
            line = line[:-2]
        elif line.endswith(b"\n"):
            line = line[:-1]
        if not line and shape.skip_empty:
            continue
        if shape.key_separator is not None and shape.key_separator not in line:
            if not shape.allow_unkeyed:
                raise CommandFailed(
                    f"line {number} has no key separator {_shown(shape.key_separator)}: "
                    "fix the input or pass --allow-unkeyed to publish such lines without a key",
                    ExitCode.USAGE,
                )
        yield line


def _argument_values(values: Sequence[str], shape: _Shape) -> Iterator[bytes]:
    # All of them are known before anything is sent: a VALUE without the separator is
    # refused as a line of a file is, but before the first message goes out.
    encoded = [_argv_bytes(value) for value in values]
    if shape.key_separator is not None and not shape.allow_unkeyed:
        for number, value in enumerate(encoded, start=1):
            if shape.key_separator not in value:
                raise CommandFailed(
                    f"VALUE {number} has no key separator {_shown(shape.key_separator)}: "
                    "fix it or pass --allow-unkeyed to publish such values without a key",
                    ExitCode.USAGE,
                )
    return iter(encoded)


def _partitioner(name: str | None) -> Partitioner | None:
    return None if name is None else partitioner_named(name)


#: Ack lines the printer may fall behind by before reading input waits for it: a
#: slow reader of the acks slows publishing down instead of filling memory.
_MAX_UNPRINTED = 10_000


class _Waker:
    """A pipe that wakes the main thread's wait for input, and Ctrl-C and SIGTERM put
    off until the main thread is between two messages.

    A signal that raised in the middle of ``publish_async`` could leave a message sent
    whose ack nobody prints; the handlers set here only record it, and :meth:`check`,
    called where no message is half-handled, raises ``KeyboardInterrupt`` or
    :class:`Terminated`. A second one raises at once (the user insists). The pipe is
    written to for a signal (:func:`signal.set_wakeup_fd`: the kernel may hand the
    signal to another thread, and nothing else would end the main thread's
    ``select()``), a failed publish, or the acks' reader gone.

    Thread-safe: :meth:`wake` may be called from any thread, the rest from the main one.
    """

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._received: int | None = None
        self._raise_now = False
        self._previous_fd: int | None = None
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            self._previous_fd = signal.set_wakeup_fd(self._write_fd)
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._record)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self._received is not None or self._raise_now:
            _raise_for(signum)
        self._received = signum

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        """Let a signal raise at once inside the block: a blocking call there holds no
        message half-handled, and would only see a recorded signal once it returned (an
        ``open()`` of a FIFO that no writer opened yet waits in the kernel, and Python
        restarts it after a handler that only records)."""
        self.check()
        self._raise_now = True
        try:
            yield
        finally:
            self._raise_now = False

    def check(self) -> None:
        """Raise for a signal received so far (``KeyboardInterrupt`` for SIGINT,
        :class:`Terminated` for SIGTERM)."""
        if self._received is not None:
            _raise_for(self._received)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._write_fd, b"\0")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.read_fd, 512):
                pass

    def close(self) -> None:
        """Restore the signal handlers; a signal received stays for :meth:`check`."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self._previous_fd is not None:
            signal.set_wakeup_fd(self._previous_fd)
        os.close(self.read_fd)
        os.close(self._write_fd)


def _raise_for(signum: int) -> NoReturn:
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt


def _fd_lines(fd: int, waker: _Waker, stop: Callable[[], bool]) -> Iterator[bytes]:
    """The lines read from ``fd`` (each with its line ending), until end of input or
    ``stop()``: a blocked read is woken by a signal, a failure or a closed output."""
    pending = bytearray()
    while True:
        waker.check()
        if stop():
            return  # a partial last line is not published either
        ready, _, _ = select.select([fd, waker.read_fd], [], [])
        if waker.read_fd in ready:
            # A signal is seen by check(), a failure or a closed output by stop().
            waker.clear()
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        start = len(pending)
        pending += chunk
        begin = 0
        while (end := pending.find(b"\n", start)) >= 0:
            yield bytes(pending[begin : end + 1])
            begin = start = end + 1
        del pending[:begin]
    if pending:
        yield bytes(pending)


class _Tracker:
    """Futures in submission order: settles them in that order as their acks come,
    prints each ack as soon as it and all earlier ones are in, keeps the first failure.

    The futures' done-callbacks (on the client's threads) settle them; a thread of its
    own (``liftbridge-cli-acks``) writes the acks, so standard output is written by one
    thread and a slow reader of it never holds up the client.

    The main thread waits on a :class:`Doorbell`, without the lock and at most
    :data:`WAIT_SLICE` at a time, not on a ``Condition``: a signal the kernel gives
    another thread is handled within a slice (the first one only recorded, see
    :class:`_Waker`), and a second one, whose handler raises, cannot end a wait while it
    takes the lock back and leave the lock released under a settling thread.

    Thread-safe: :meth:`add`, :meth:`wait_settled` and :meth:`close` are called by the
    command's main thread, the settling by any thread.
    """

    def __init__(self, print_acks: bool, waker: _Waker | None = None) -> None:
        self._lock = threading.Lock()
        #: Rung under the lock when a future settles, acks are taken for printing, the
        #: output goes, the command closes or the printer ends.
        self._changed = Doorbell()
        self._printer_ended = False
        self._pending: collections.deque[concurrent.futures.Future[Ack | None]] = (
            collections.deque()
        )
        self._unprinted: list[bytes] = []
        self._closing = False
        self._waker = waker
        self.sent = 0
        self.acked = 0
        self.failed = 0
        #: Given up unacknowledged when the command was stopped (Ctrl-C, SIGTERM).
        self.unacknowledged = 0
        self.first_error: BaseException | None = None
        #: The reader of the printed acks went away (``| head``): input is no longer read.
        self.output_closed = False
        #: Writing the acks failed otherwise (a full disk): input is no longer read.
        self.output_error: Exception | None = None
        #: A failure was seen while sending: the rest of the input was not read.
        self.stopped_reading = False
        self._printer: threading.Thread | None = None
        if print_acks:
            self._printer = threading.Thread(
                target=self._print, args=(Output(),), name="liftbridge-cli-acks", daemon=True
            )
            self._printer.start()

    def add(self, future: concurrent.futures.Future[Ack | None]) -> None:
        """Track ``future``; raise :class:`PipeClosed` once the acks' reader is gone, or
        for a signal received (:meth:`_Waker.check`)."""
        with self._lock:
            self.sent += 1
            self._pending.append(future)
        future.add_done_callback(self._settle_done)
        self._wait_while(lambda: len(self._unprinted) >= _MAX_UNPRINTED and not self._output_gone())
        with self._lock:
            gone = self._output_gone()
        if gone:
            raise PipeClosed()  # the command says which, once all is settled
        self._check_signals()

    def stop_reading(self) -> bool:
        """Whether reading input should stop: a failure seen or the output gone."""
        return self.first_error is not None or self._output_gone()

    def _output_gone(self) -> bool:
        return self.output_closed or self.output_error is not None

    def wait_settled(self) -> None:
        """Wait until every future added is settled (each ends by its ack timeout)."""
        self._wait_while(lambda: bool(self._pending))

    def _wait_while(self, blocked: Callable[[], bool], *, check: bool = True) -> None:
        """Wait while ``blocked()``, asked with the lock held; after each sleep (at most
        :data:`WAIT_SLICE`, without the lock) raise for a signal received when ``check``
        (not in :meth:`close` or on the printer: they wait for the acks to be out)."""
        self._changed.wait(
            self._lock,
            lambda: None if blocked() else True,
            between=self._check_signals if check else None,
        )

    def _check_signals(self) -> None:
        if self._waker is not None:
            self._waker.check()

    def close(self) -> None:
        """Print the acks settled so far, flush, and end the printing thread."""
        with self._lock:
            self._closing = True
            self._changed.ring()
        if self._printer is not None:
            # Not join() alone: a signal given another thread would be handled only
            # once a printer held up by a slow reader of the acks had ended.
            self._wait_while(lambda: not self._printer_ended, check=False)
            self._printer.join()  # it is ending

    def _settle_done(self, _: object) -> None:
        # On the thread that resolved a future (or the main thread if it already was):
        # settle the leading run of resolved futures, in submission order.
        wake = False
        with self._lock:
            while self._pending and self._pending[0].done():
                future = self._pending.popleft()
                error = future.exception()
                if isinstance(error, ClientClosedError):
                    # Still pending when a stopped command closed its client: whether
                    # the broker stored it is unknown, which "failed" would not say.
                    self.unacknowledged += 1
                    continue
                if error is not None:
                    self.failed += 1
                    if self.first_error is None:
                        self.first_error = error
                        wake = True
                    continue
                self.acked += 1
                ack = future.result()
                if self._printer is not None and ack is not None and not self._output_gone():
                    record = {
                        "stream": ack.stream,
                        "partition": ack.partition,
                        "offset": ack.offset,
                    }
                    self._unprinted.append(json.dumps(record).encode() + b"\n")
            self._changed.ring()
        if wake and self._waker is not None:
            self._waker.wake()  # a wait for the next input line ends now

    def _print(self, out: Output) -> None:
        try:
            self._print_acks(out)
        finally:
            with self._lock:
                self._printer_ended = True
                self._changed.ring()

    def _print_acks(self, out: Output) -> None:
        while True:
            self._wait_while(lambda: not self._unprinted and not self._closing, check=False)
            with self._lock:
                lines, self._unprinted = self._unprinted, []
                closing = self._closing
                self._changed.ring()  # room for add()
            try:
                if lines:
                    out.write(b"".join(lines))
                out.flush()
            except (PipeClosed, Exception) as exc:
                # Every message sent so far is still settled; only reading more input
                # stops, and the summary says how far it got. Not only a closed pipe:
                # a full disk (OSError), a closed stdout (CommandFailed) end it too.
                with self._lock:
                    if isinstance(exc, PipeClosed):
                        self.output_closed = True
                    else:
                        self.output_error = exc
                    self._unprinted.clear()
                    self._changed.ring()
                if self._waker is not None:
                    self._waker.wake()
                return
            if closing:
                with self._lock:
                    if not self._unprinted:
                        return


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
    callback=refuse_empty("unkeyed lines"),
    help="Split each line at the first SEP into key and value.",
)
@click.option("-H", "--header", "headers", multiple=True, help="NAME=VALUE; repeatable.")
@click.option("-P", "--partition", type=PARTITION, help="Target partition.")
@click.option(
    "--partitioner",
    type=click.Choice(list(PARTITIONER_NAMES)),
    help="Choose the partition by key hash or in turn.",
)
@click.option(
    "--ack-policy",
    type=click.Choice(list(_POLICIES)),
    default="leader",
    show_default=True,
    help="none: no acks; a missing or read-only target is refused before sending.",
)
@click.option(
    "--print-acks",
    is_flag=True,
    help="Print one JSON line per ack as soon as it and all earlier ones are in (input order).",
)
@click.option("--skip-empty", is_flag=True, help="Do not publish empty input lines.")
@click.option(
    "--allow-unkeyed",
    is_flag=True,
    help="With -K, publish a line or VALUE without the separator with no key (default: refuse it).",
)
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
    skip_empty: bool,
    allow_unkeyed: bool,
) -> None:
    """Publish VALUES to STREAM, or one message per line of a file or standard input.

    A line ends at LF or CRLF (neither is published); an empty line is an empty message
    unless --skip-empty.
    """
    if values and path:
        raise click.UsageError("give VALUES or --file, not both")
    if partition is not None and partitioner:
        raise click.UsageError("give --partition or --partitioner, not both")
    if key is not None and key_separator:
        raise click.UsageError("give --key or --key-separator, not both")
    if print_acks and ack_policy == "none":
        raise click.UsageError("--print-acks needs acks: use --ack-policy leader or all")
    shape = _Shape(
        stream=stream,
        key=_argv_bytes(key) if key is not None else None,
        key_separator=_argv_bytes(key_separator) if key_separator else None,
        headers=_headers(headers),
        partition=partition,
        partitioner=_partitioner(partitioner),
        policy=_POLICIES[ack_policy],
        skip_empty=skip_empty,
        allow_unkeyed=allow_unkeyed,
    )
    if not values and (path or "-") == "-":
        sys.stdin.fileno()  # a closed standard input fails here, before a client is made
    waker = _Waker()
    tracker = _Tracker(print_acks, waker)
    try:
        try:
            with open_client(settings_of(ctx)) as client:
                if shape.policy is AckPolicy.NONE:
                    _check_unacked_target(client, shape)
                try:
                    if values:
                        _send(client, shape, _argument_values(values, shape), tracker)
                    else:
                        _publish_file(client, shape, path or "-", tracker, waker)
                except PipeClosed:
                    pass  # summarised below, once every message sent is settled
                except CommandFailed as exc:  # bad input line: say what went out before it
                    tracker.wait_settled()
                    raise CommandFailed(
                        f"{exc} ({tracker.acked} earlier message(s) published)", exc.code
                    ) from None
                tracker.wait_settled()
        finally:
            # Also on Ctrl-C: closing the client above waited for the acks of what was
            # sent, and they are printed before the command ends.
            tracker.close()
            waker.close()
        waker.check()  # a signal received after the last check: exit as it asks
    except (KeyboardInterrupt, Terminated) as exc:
        # main() says "interrupted" or "terminated", and with it how far publishing got:
        # where to take up the input again.
        raise type(exc)(_how_far(tracker, shape.policy)) from None
    if tracker.output_error is not None:
        silence_stdout()
        raise CommandFailed(
            f"cannot print the acks: {tracker.output_error}; stopped reading input after "
            f"{tracker.sent} message{'' if tracker.sent == 1 else 's'}; {tracker.acked} "
            f"published, {tracker.failed} failed",
            ExitCode.ERROR,
        )
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
        if shape.policy is AckPolicy.NONE:
            click.echo(
                f"sent {tracker.acked} {noun} to {stream} (--ack-policy none: not acknowledged)",
                err=True,
            )
        else:
            click.echo(f"published {tracker.acked} {noun} to {stream}", err=True)
    else:
        error = tracker.first_error
        code = (
            exit_code_for(error) if isinstance(error, LiftbridgeError) else ExitCode.PUBLISH_FAILED
        )
        if code is ExitCode.USAGE:
            # The command line was right: a message of the input was refused (too large).
            code = ExitCode.PUBLISH_FAILED
        unread = (
            f" and input after message {tracker.sent} was not read (publishing stops at "
            "the first failure)"
            if tracker.stopped_reading
            else ""
        )
        failed = f"{tracker.failed} of {tracker.sent} messages failed{unread}"
        raise CommandFailed(
            f"{failed}, the first with: {error}",
            code if code is not ExitCode.ERROR else ExitCode.PUBLISH_FAILED,
        ) from error


def _how_far(tracker: _Tracker, policy: AckPolicy) -> str:
    """What a stopped publish got done, in the terms of the end-of-run summary."""
    done = "sent" if policy is AckPolicy.NONE else "published"
    unsettled = tracker.sent - tracker.acked - tracker.failed  # unacknowledged included
    return (
        f"{tracker.sent} message{'' if tracker.sent == 1 else 's'} read, "
        f"{tracker.acked} {done}, {tracker.failed} failed"
        + (f", {unsettled} unacknowledged" if unsettled else "")
    )


def _check_unacked_target(client: Client, shape: _Shape) -> None:
    """Refuse, before sending, a target whose broker would drop every message.

    With ``--ack-policy none`` nothing waits for the broker's answer: a publish to a
    missing stream or partition, or to a read-only one, would be lost without a word.
    """
    if shape.partitioner is None:
        partitions: list[PartitionInfo] = [
            client.fetch_partition_metadata(shape.stream, shape.partition or 0)
        ]
    else:
        info = client.fetch_metadata(shape.stream).streams.get(shape.stream)
        if info is None:
            raise NoSuchStreamError(f"no such stream: {shape.stream!r}")
        partitions = list(info.partitions.values())
    readonly = sorted(part.id for part in partitions if part.readonly)
    if readonly:
        listed = ", ".join(str(pid) for pid in readonly)
        raise CommandFailed(
            f"stream {shape.stream} partition{'s' if len(readonly) > 1 else ''} {listed} "
            f"{'are' if len(readonly) > 1 else 'is'} read-only: nothing sent (with "
            "--ack-policy none the broker's refusal would go unseen)",
            ExitCode.PUBLISH_FAILED,
        )


def _publish_file(
    client: Client, shape: _Shape, path: str, tracker: _Tracker, waker: _Waker
) -> None:
    def stop() -> bool:
        if tracker.first_error is not None:
            tracker.stopped_reading = True
        return tracker.stop_reading()

    if path == "-":
        raw = _fd_lines(sys.stdin.fileno(), waker, stop)
        _send(client, shape, _lines(raw, Silent(), shape), tracker)
        return
    try:
        with waker.raising():
            handle = open(path, "rb", buffering=0)
    except OSError as exc:
        raise click.FileError(path, hint=exc.strerror or str(exc)) from None
    with (
        handle,
        progress(f"publishing {os.path.basename(path)}", os.fstat(handle.fileno()).st_size) as bar,
    ):
        _send(client, shape, _lines(_fd_lines(handle.fileno(), waker, stop), bar, shape), tracker)


def _send(client: Client, shape: _Shape, messages: Iterator[bytes], tracker: _Tracker) -> None:
    for value in messages:
        message_key = shape.key
        if shape.key_separator is not None:
            head, sep, tail = value.partition(shape.key_separator)
            message_key, value = (head, tail) if sep else (None, value)
        try:
            future = client.publish_async(
                shape.stream,
                value,
                key=message_key,
                partition=shape.partition,
                partitioner=shape.partitioner,
                headers=shape.headers or None,
                ack_policy=shape.policy,
            )
        except PublishError as exc:
            # Refused before sending (a message over the server's limit, no free slot):
            # a failed publish like the others, not the end of the command. Known at
            # once, so no more input is read, whether or not the earlier acks are in
            # (the tracker sees failures in order, as the acks come).
            failed: concurrent.futures.Future[Ack | None] = concurrent.futures.Future()
            failed.set_exception(exc)
            tracker.add(failed)
            tracker.stopped_reading = True
            return
        tracker.add(future)
        if tracker.first_error is not None:
            tracker.stopped_reading = True
            return
