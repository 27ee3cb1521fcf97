"""``metadata``: brokers, streams and partitions as tables (or JSON)."""

from __future__ import annotations

import io
import json
import shutil
import sys
from typing import TYPE_CHECKING

import click

from liftbridge_sync import Metadata, NoSuchStreamError
from liftbridge_sync.cli.app import cli, settings_of
from liftbridge_sync.cli.context import open_client
from liftbridge_sync.cli.output import Output
from liftbridge_sync.models._metadata import is_paused

if TYPE_CHECKING:  # loaded when tables are drawn: rich costs a fifth of every start
    from rich.table import Table

__all__ = ["metadata", "metadata_record"]

#: Wider than any row: rich sizes tables to their content, never to the console.
_PIPED_WIDTH = 1_000_000


def metadata_record(meta: Metadata) -> dict[str, object]:
    """Metadata as plain JSON-able data.

    Thread-safe: a pure function.
    """
    return {
        "brokers": [
            {
                "id": b.id,
                "address": b.address,
                "partitions": b.partition_count,
                "leaders": b.leader_count,
                **({"advertised": b.advertised} if b.advertised else {}),
            }
            for b in meta.brokers
        ],
        "streams": {
            name: {
                "subject": info.subject,
                "partitions": {
                    str(pid): {
                        "leader": part.leader,
                        "replicas": list(part.replicas),
                        "isr": list(part.isr),
                        "high_watermark": part.high_watermark,
                        "newest_offset": part.newest_offset,
                        "paused": is_paused(part),
                        "readonly": part.readonly,
                    }
                    for pid, part in sorted(info.partitions.items())
                },
            }
            for name, info in sorted(meta.streams.items())
        },
    }


def _tables(meta: Metadata) -> tuple[Table, Table]:
    from rich.table import Table

    brokers = Table(title="Brokers")
    for column in ("id", "address", "partitions", "leaders"):
        brokers.add_column(
            column,
            justify="right" if column in ("partitions", "leaders") else "left",
            overflow="fold",
        )
    for b in meta.brokers:
        brokers.add_row(b.id, b.address, str(b.partition_count), str(b.leader_count))
    streams = Table(title="Streams")
    columns = ("stream", "subject", "partition", "leader", "isr", "hw", "newest", "state")
    for column in columns:
        streams.add_column(
            column,
            justify="right" if column in ("partition", "hw", "newest") else "left",
            overflow="fold",
        )
    for name, info in sorted(meta.streams.items()):
        for pid, part in sorted(info.partitions.items()):
            state = ",".join(
                s for s, on in (("paused", is_paused(part)), ("readonly", part.readonly)) if on
            )
            streams.add_row(
                name,
                info.partition_subject(pid),
                str(pid),
                part.leader or "-",
                ",".join(part.isr),
                str(part.high_watermark),
                str(part.newest_offset),
                state or "ok",
            )
    return brokers, streams


@cli.command()
@click.argument("streams", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.pass_context
def metadata(ctx: click.Context, streams: tuple[str, ...], as_json: bool) -> None:
    """Show brokers, streams, partitions, leaders, ISR and watermarks (all streams by default).

    Piped, the tables keep every name whole; --json is the form for programs. A STREAM
    that does not exist prints nothing and exits 3.
    """
    with open_client(settings_of(ctx)) as client:
        meta = client.fetch_metadata(*streams)
    missing = sorted({s for s in streams if s not in meta.streams})
    if missing:
        # Before anything is printed: the brokers and an empty or partial streams table
        # (or a JSON record without the stream) read as an answer, exit 3 or not.
        raise NoSuchStreamError(
            f"no such stream{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
        )
    out = Output()
    if as_json:
        out.write(json.dumps(metadata_record(meta), indent=2).encode() + b"\n")
    else:
        tty = sys.stdout.isatty()
        # A terminal folds long cells onto more lines; piped output is as wide as the
        # longest row, so that grep and cut see every name whole.
        width = shutil.get_terminal_size().columns if tty else _PIPED_WIDTH
        buffer = io.StringIO()
        # Names are data, not Rich markup or emoji codes: "a[bold]b" and "x:fire:" print as
        # they are (and "x[/x]" does not fail).
        from rich.console import Console

        console = Console(
            file=buffer,
            width=width,
            force_terminal=tty,
            no_color=not tty,
            markup=False,
            emoji=False,
        )
        for table in _tables(meta):
            console.print(table)
        out.write(buffer.getvalue().encode("utf-8"))
    out.flush()
