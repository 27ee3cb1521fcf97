"""``bench``: quick publish and subscribe throughput against a server."""

from __future__ import annotations

import io
import json
import time
import uuid

import click

from liftbridge_sync import NoSuchStreamError, StartAt, StopAt
from liftbridge_sync._wire.validate import SERVER_MAX_REQUEST_BYTES
from liftbridge_sync.cli.app import cli, refuse_empty, settings_of
from liftbridge_sync.cli.context import open_client
from liftbridge_sync.cli.errors import CommandFailed, ExitCode
from liftbridge_sync.cli.output import Output
from liftbridge_sync.cli.progress import progress

__all__ = ["bench"]

#: Bytes of a publish request besides its value: the stream name (at most 255),
#: correlation id and field tags, with room to spare.
_REQUEST_ROOM = 1024


@cli.command()
@click.option("-n", "--count", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.option(
    "--size",
    # No message is larger than a request the server accepts, with room for the
    # request's other fields (stream name, ids).
    type=click.IntRange(min=0, max=SERVER_MAX_REQUEST_BYTES - _REQUEST_ROOM),
    default=100,
    show_default=True,
    help="Bytes per message (the NATS server's max_payload, 1 MiB by default, may refuse less).",
)
@click.option(
    "--stream",
    callback=refuse_empty("a temporary stream"),
    help="Use this existing stream (default: a temporary one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def bench(ctx: click.Context, count: int, size: int, stream: str | None, as_json: bool) -> None:
    """Publish COUNT messages with publish_async, then read them back; print the rates."""
    payload = b"x" * size
    with open_client(settings_of(ctx)) as client:
        temporary = stream is None
        name = stream or f"liftbridge-sync-bench-{uuid.uuid4().hex[:8]}"
        if temporary:
            client.create_stream(name, name)
        try:
            first = client.fetch_partition_metadata(name, 0).newest_offset + 1
            begin = time.perf_counter()
            failures: list[BaseException] = []
            with progress("publishing", count) as bar:
                futures = []
                for _ in range(count):
                    futures.append(client.publish_async(name, payload, partition=0))
                    bar.advance(1)
                for future in futures:
                    failure = future.exception()
                    if failure is not None:
                        failures.append(failure)
            published = time.perf_counter() - begin
            if failures:
                cause = failures[0]
                raise CommandFailed(
                    f"{len(failures)} of {count} publishes failed; the first with "
                    f"{type(cause).__name__}: {cause}",
                    ExitCode.PUBLISH_FAILED,
                )
            begin = time.perf_counter()
            received = 0
            with (
                progress("subscribing", count) as bar,
                client.subscribe(
                    name, start=StartAt.offset(first), stop=StopAt.offset(first + count - 1)
                ) as sub,
            ):
                for _ in sub:
                    received += 1
                    bar.advance(1)
            read = time.perf_counter() - begin
        finally:
            if temporary:
                try:
                    client.delete_stream(name)
                except NoSuchStreamError:
                    pass
    results = {
        "messages": count,
        "bytes": size,
        "publish_seconds": round(published, 4),
        "publish_per_second": round(count / published),
        "subscribe_seconds": round(read, 4),
        "subscribe_per_second": round(received / read) if read else 0,
        "received": received,
    }
    out = Output()
    if as_json:
        out.write(json.dumps(results).encode() + b"\n")
    else:
        # Here, not at import: rich costs a fifth of every start, --help's included.
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"bench: {count} messages of {size} bytes")
        for column in ("phase", "seconds", "msg/s", "MB/s"):
            table.add_column(column, justify="right")
        for phase, seconds in (("publish", published), ("subscribe", read)):
            rate = count / seconds if seconds else 0.0
            table.add_row(phase, f"{seconds:.3f}", f"{rate:,.0f}", f"{rate * size / 1e6:.2f}")
        buffer = io.StringIO()
        Console(file=buffer, width=100).print(table)
        out.write(buffer.getvalue().encode())
    out.flush()
    if received != count:
        raise CommandFailed(f"read back {received} of {count} messages", ExitCode.ERROR)
