"""Stream administration: ``create``, ``delete``, ``pause``, ``readonly``, ``cursor``."""

from __future__ import annotations

import math

import click

from liftbridge_sync._wire.validate import DURATION_MAX_MS, INT32_MAX, INT64_MAX, MAX_PARTITIONS
from liftbridge_sync.cli.app import PARTITION, cli, refuse_empty, settings_of
from liftbridge_sync.cli.context import open_client

__all__ = ["create", "cursor", "delete", "pause", "readonly"]


def _replication_factor(value: int) -> int:
    # Checked here so that the error names the option, not the client's parameter.
    if value == 0:
        raise click.BadParameter(
            "0 replicas: give 1 or more, or -1 for one on every broker",
            param_hint="--replication-factor",
        )
    return value


def _retention_age(value: float | None) -> float | None:
    # Checked here so that the error names the option and speaks in seconds, not in the
    # client's terms ("use None or inf").
    if value is None or math.isinf(value):
        return value  # inf: no limit (sent as 0, the server's "none")
    if math.isnan(value):
        raise click.BadParameter(f"{value} is not a number of seconds")
    if value > DURATION_MAX_MS / 1000:
        raise click.BadParameter(
            f"{value:g} s is longer than the server holds (at most {DURATION_MAX_MS / 1000:g} s; "
            "inf for no limit)"
        )
    if 0 < value < 0.0005:
        raise click.BadParameter(
            f"{value:g} s is below 1 ms, which the server would take for no limit"
        )
    return value


def _cursor_id(value: str) -> str:
    if not value:
        raise click.BadParameter("an empty cursor id")
    return value


@cli.command()
@click.argument("name")
@click.option(
    "-s",
    "--subject",
    callback=refuse_empty("NAME"),
    help="NATS subject (default: the stream name).",
)
@click.option(
    "-p",
    "--partitions",
    type=click.IntRange(min=1, max=MAX_PARTITIONS),
    default=1,
    show_default=True,
)
@click.option(
    "-r",
    "--replication-factor",
    type=click.IntRange(min=-1, max=INT32_MAX),
    callback=lambda ctx, param, value: _replication_factor(value),
    default=1,
    show_default=True,
    help="Replicas of each partition; -1: one on every broker.",
)
@click.option("--group", callback=refuse_empty("none"), help="NATS queue group.")
@click.option(
    "--retention-max-messages",
    type=click.IntRange(min=0, max=INT64_MAX),
    help="Messages kept per partition (0: no limit).",
)
@click.option(
    "--retention-max-bytes",
    type=click.IntRange(min=0, max=INT64_MAX),
    help="Bytes kept per partition (0: no limit).",
)
@click.option(
    "--retention-max-age",
    type=click.FloatRange(min=0),
    callback=lambda ctx, param, value: _retention_age(value),
    help="Seconds (0 or inf: no limit).",
)
@click.option("--compact/--no-compact", default=None, help="Keep the latest message per key.")
@click.option("--exist-ok", is_flag=True, help="Succeed if the stream already exists.")
@click.pass_context
def create(
    ctx: click.Context,
    name: str,
    subject: str | None,
    partitions: int,
    replication_factor: int,
    group: str | None,
    retention_max_messages: int | None,
    retention_max_bytes: int | None,
    retention_max_age: float | None,
    compact: bool | None,
    exist_ok: bool,
) -> None:
    """Create stream NAME."""
    with open_client(settings_of(ctx)) as client:
        created = client.create_stream(
            subject or name,
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            group=group,
            retention_max_messages=retention_max_messages,
            retention_max_bytes=retention_max_bytes,
            retention_max_age=retention_max_age,
            compact_enabled=compact,
            exist_ok=exist_ok,
        )
    click.echo(f"created stream {name}" if created else f"stream {name} already exists", err=True)


@cli.command()
@click.argument("name")
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete stream NAME."""
    with open_client(settings_of(ctx)) as client:
        client.delete_stream(name)
    click.echo(f"deleted stream {name}", err=True)


@cli.command()
@click.argument("name")
@click.option("-P", "--partition", "partitions", type=PARTITION, multiple=True, help="Repeatable.")
@click.option("--resume-all", is_flag=True, help="A publish to any partition resumes all.")
@click.pass_context
def pause(ctx: click.Context, name: str, partitions: tuple[int, ...], resume_all: bool) -> None:
    """Pause partitions of stream NAME (all by default)."""
    with open_client(settings_of(ctx)) as client:
        client.pause_stream(name, partitions=partitions or None, resume_all=resume_all)
    click.echo(f"paused {_which(name, partitions)}", err=True)


@cli.command()
@click.argument("name")
@click.option("-P", "--partition", "partitions", type=PARTITION, multiple=True, help="Repeatable.")
@click.option("--off", is_flag=True, help="Make the partitions writable again.")
@click.pass_context
def readonly(ctx: click.Context, name: str, partitions: tuple[int, ...], off: bool) -> None:
    """Make partitions of stream NAME read-only (all by default), or writable with --off."""
    with open_client(settings_of(ctx)) as client:
        client.set_stream_readonly(name, partitions=partitions or None, readonly=not off)
    state = "writable" if off else "read-only"
    verb = "are" if len(set(partitions)) > 1 else "is"
    click.echo(f"{_which(name, partitions)} {verb} {state}", err=True)


def _which(name: str, partitions: tuple[int, ...]) -> str:
    """What a pause or readonly command changed: the stream, or only some partitions."""
    if not partitions:
        return f"stream {name}"
    listed = ", ".join(str(p) for p in sorted(set(partitions)))
    return f"stream {name} partition{'s' if len(set(partitions)) > 1 else ''} {listed}"


@cli.group()
def cursor() -> None:
    """Read or store a consumer cursor (the last processed offset)."""


@cursor.command("get")
@click.argument("stream")
@click.argument("cursor_id", callback=lambda ctx, param, value: _cursor_id(value))
@click.option("-P", "--partition", type=PARTITION, default=0, show_default=True)
@click.pass_context
def cursor_get(ctx: click.Context, stream: str, cursor_id: str, partition: int) -> None:
    """Print the offset stored under CURSOR_ID for STREAM (-1 when none)."""
    with open_client(settings_of(ctx)) as client:
        offset = client.fetch_cursor(cursor_id, stream, partition)
    click.echo(str(offset))


# "-1" (no cursor, the smallest OFFSET) would be read as an unknown option otherwise.
@cursor.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("stream")
@click.argument("cursor_id", callback=lambda ctx, param, value: _cursor_id(value))
@click.argument("offset", type=click.IntRange(min=-1, max=INT64_MAX))
@click.option("-P", "--partition", type=PARTITION, default=0, show_default=True)
@click.pass_context
def cursor_set(
    ctx: click.Context, stream: str, cursor_id: str, offset: int, partition: int
) -> None:
    """Store OFFSET under CURSOR_ID for STREAM."""
    with open_client(settings_of(ctx)) as client:
        client.set_cursor(cursor_id, stream, partition, offset)
    click.echo(f"cursor {cursor_id} of {stream}[{partition}] = {offset}", err=True)
