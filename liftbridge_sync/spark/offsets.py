"""Resolve offset specifications to concrete per-partition offsets.

Offsets follow the Kafka connector's conventions: ``earliest``, ``latest``, or JSON
``{"orders": {"0": 23, "1": -2}}`` where ``-2`` means earliest and ``-1`` latest. Every
offset is the *next offset to read*: latest is the high watermark + 1. Streaming
offsets in the checkpoint use the same JSON shape, so progress output can be pasted
into ``startingOffsets``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from liftbridge_sync import (
    Client,
    ConfigurationError,
    NoSuchStreamError,
    StartAt,
    StopAt,
    StreamInfo,
)
from liftbridge_sync._wire.validate import INT64_MAX
from liftbridge_sync.spark.cleaner import retry_segment_closed
from liftbridge_sync.spark.config import load_json, parse_partition_key
from liftbridge_sync.spark.paused import paused_told
from liftbridge_sync.spark.preflight import brokers_named
from liftbridge_sync.spark.source_options import SourceOptions

_log = logging.getLogger("liftbridge_sync.spark")
#: Seconds between the two looks at a watermark behind the newest offset.
_STALE_AFTER = 0.25

__all__ = [
    "CREATED",
    "EARLIEST",
    "LATEST",
    "NoOffsetForTimestampError",
    "Offsets",
    "created_of",
    "end_offsets",
    "from_json_dict",
    "high_watermarks",
    "parse_spec",
    "resolve",
    "start_offsets",
    "stream_info",
    "stream_partitions",
    "timestamps_for",
    "to_json_dict",
]

EARLIEST = -2
LATEST = -1

#: Partition id to offset.
Offsets = dict[int, int]


def stream_info(client: Client, stream: str) -> StreamInfo:
    """The metadata of ``stream``.

    Raises:
        NoSuchStreamError: the stream does not exist.
        BrokerUnavailableError: no broker answered (the message names ``brokers``).
    """
    with brokers_named(client.options):
        info = client.fetch_metadata(stream).streams.get(stream)
    if info is None:
        raise NoSuchStreamError(f"stream {stream!r} does not exist (option 'stream')")
    return info


def stream_partitions(
    client: Client, stream: str, wanted: tuple[int, ...] | None, info: StreamInfo | None = None
) -> list[int]:
    """The partition ids to read: all of ``stream``'s, or ``wanted`` after checking them.

    Args:
        info: The stream's metadata when already fetched (else it is fetched).

    Raises:
        NoSuchStreamError: the stream does not exist.
        ConfigurationError: a wanted partition does not exist.
    """
    if info is None:
        info = stream_info(client, stream)
    existing = sorted(info.partitions)
    if wanted is None:
        return existing
    missing = sorted(set(wanted) - set(existing))
    if missing:
        raise ConfigurationError(
            f"option 'partitions': stream {stream!r} has no partition {missing} (it has {existing})"
        )
    return list(wanted)


def parse_spec(
    option: str, raw: str | None, stream: str, partitions: list[int], default: int
) -> Offsets:
    """Turn ``earliest``/``latest``/JSON into partition -> offset (or -2/-1 markers).

    Partitions the JSON leaves out get ``default``.

    Raises:
        ConfigurationError: the value is not ``earliest``, ``latest`` or valid JSON of
            the right shape; the message names ``option``.
    """
    if raw is None:
        return dict.fromkeys(partitions, default)
    text = raw.strip()
    if text.lower() == "earliest":
        return dict.fromkeys(partitions, EARLIEST)
    if text.lower() == "latest":
        return dict.fromkeys(partitions, LATEST)
    example = f'\'{{"{stream}": {{"0": 23, "1": -2}}}}\''
    parsed = load_json(option, text, f"'earliest', 'latest' or JSON like {example}")
    if isinstance(parsed, dict) and stream != CREATED:
        # Offsets pasted from a query's progress carry the stream's creation time.
        parsed.pop(CREATED, None)
    if not isinstance(parsed, dict) or set(parsed) != {stream}:
        raise ConfigurationError(
            f"option {option!r} must be a JSON object keyed by the stream {stream!r}, "
            f"like {example}; got {text!r}"
        )
    per_partition = parsed[stream]
    if not isinstance(per_partition, dict):
        raise ConfigurationError(f"option {option!r}: {stream!r} must map partitions to offsets")
    result = dict.fromkeys(partitions, default)
    given: set[int] = set()
    for key, value in per_partition.items():
        partition = parse_partition_key(key)
        if partition is None:
            raise ConfigurationError(f"option {option!r}: {key!r} is not a partition id")
        if partition not in result:
            raise ConfigurationError(
                f"option {option!r}: partition {partition} is not read (partitions {partitions})"
            )
        if partition in given:
            raise ConfigurationError(f"option {option!r} names partition {partition} twice")
        given.add(partition)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not EARLIEST <= value <= INT64_MAX
        ):
            raise ConfigurationError(
                f"option {option!r}: offset of partition {partition} must be an int from -2 "
                f"to {INT64_MAX}, got {value!r}"
            )
        result[partition] = value
    return result


def high_watermarks(
    client: Client, stream: str, partitions: list[int], *, warn_stale: bool = False
) -> Offsets:
    """The high watermark (last committed offset, -1 when empty) of each partition.

    With ``warn_stale`` (where a read's end is fixed: a batch read, a streaming query's
    start, an ``availableNow`` run), a partition whose newest offset is past its
    watermark is looked at again a moment later, and a WARNING names the offsets a
    watermark that did not move leaves out: after a restart v1.9.0 answers the
    watermark it last checkpointed (-1 for a young stream) until it commits a new
    message, and a read to ``latest`` then returned fewer rows than the log holds, or
    none, without a word. (A watermark that moves is replication catching up.)
    """
    infos = {p: client.fetch_partition_metadata(stream, p) for p in partitions}
    if warn_stale:
        behind = [p for p, info in infos.items() if info.newest_offset > info.high_watermark]
        if behind:
            time.sleep(_STALE_AFTER)  # long enough for a live leader to commit
            for partition in behind:
                again = client.fetch_partition_metadata(stream, partition)
                if again.high_watermark != infos[partition].high_watermark:
                    infos[partition] = again  # it moves: no restart's stale watermark
                    continue
                _log.warning(
                    "stream %r partition %d: offsets %d..%d are written but not committed "
                    "(high watermark %d, not moving): the read ends before them. A "
                    "restarted server answers the watermark it last checkpointed until it "
                    "commits a new message: publish one, or read again once one was",
                    stream,
                    partition,
                    again.high_watermark + 1,
                    again.newest_offset,
                    again.high_watermark,
                )
    return {p: info.high_watermark for p, info in infos.items()}


def _first_offset(
    client: Client, stream: str, partition: int, start: StartAt, hw: int, resume: bool
) -> int:
    """Offset of the first message at ``start`` up to ``hw``, or ``hw + 1`` if none
    (``resume``: option ``resumePaused``)."""
    if hw < 0:
        return 0

    def first() -> int:
        with client.subscribe(
            stream, partition=partition, start=start, stop=StopAt.offset(hw), resume=resume
        ) as sub:
            for message in sub:
                return message.offset
        return hw + 1

    # A compacted stream's cleaner may close the segment under the reader.
    with paused_told(stream, partition):
        return retry_segment_closed(first)


class NoOffsetForTimestampError(ConfigurationError):
    """A start timestamp matches no message and the strategy is ``error`` (Kafka's).

    Option ``startingOffsetsByTimestampStrategy=latest`` starts such partitions at the
    high watermark + 1 instead.
    """


def timestamps_for(
    option: str, pairs: tuple[tuple[int, int], ...] | None, partitions: list[int]
) -> dict[int, int]:
    """Per-partition epoch ms of ``pairs``, after checking the partitions are read.

    Raises:
        ConfigurationError: a partition in ``pairs`` is not read (named with ``option``).
    """
    result = dict(pairs or ())
    extra = sorted(set(result) - set(partitions))
    if extra:
        raise ConfigurationError(
            f"option {option!r}: partition {extra} is not read (partitions {partitions})"
        )
    return result


def resolve(
    client: Client,
    options: SourceOptions,
    spec: Mapping[int, int],
    hws: Mapping[int, int],
    *,
    timestamps: Mapping[int, int] | None = None,
    strategy: str = "latest",
    option: str = "startingTimestamp",
) -> Offsets:
    """Replace the -2/-1 markers (or start timestamps) with real next-offsets.

    Earliest is the oldest retained offset (read from the server), latest is HW + 1.
    Explicit offsets are kept as they are. A partition in ``timestamps`` (epoch ms)
    resolves to its first message received at or after that time, found by the
    server (a TIMESTAMP start position); when there is none, ``strategy`` says what
    happens: ``"latest"`` gives HW + 1, ``"error"`` raises.

    Raises:
        NoOffsetForTimestampError: a timestamp matches no message with strategy
            ``"error"`` (the message names the partition and ``option``).
        PartitionPausedError: a partition to look in is paused and option
            ``resumePaused`` is off.
    """
    stream, resume = options.stream, options.resume_paused
    result: Offsets = {}
    for partition, offset in spec.items():
        hw = hws[partition]
        timestamp_ms = timestamps.get(partition) if timestamps else None
        if timestamp_ms is not None:
            # Past April 2262 is past every message (the server keeps int64 nanoseconds):
            # the same as the last instant it can store, so Long.MaxValue means "no end".
            at = StartAt.timestamp(min(timestamp_ms * 1_000_000, INT64_MAX))
            found = _first_offset(client, stream, partition, at, hw, resume)
            if found > hw and strategy == "error":
                raise NoOffsetForTimestampError(
                    f"stream {stream!r} partition {partition}: no message at or after "
                    f"timestamp {timestamp_ms} (option {option!r}; the newest offset is "
                    f"{hw}); set option startingOffsetsByTimestampStrategy=latest to start "
                    "at the latest offset instead"
                )
            result[partition] = found
        elif offset == EARLIEST:
            result[partition] = _first_offset(
                client, stream, partition, StartAt.earliest(), hw, resume
            )
        elif offset == LATEST:
            result[partition] = hw + 1
        else:
            result[partition] = offset
    return result


def start_offsets(
    client: Client,
    options: SourceOptions,
    partitions: list[int],
    hws: Mapping[int, int],
    default: int,
) -> Offsets:
    """Where a read starts in each partition, from every starting option.

    ``startingTimestamp`` applies to all partitions, ``startingOffsetsByTimestamp`` to
    those it names; ``startingOffsets`` (else ``default``) to the rest.

    Raises:
        ConfigurationError: an option is malformed or names a partition not read.
        NoOffsetForTimestampError: see :func:`resolve`.
    """
    stream = options.stream
    spec = parse_spec("startingOffsets", options.starting_offsets, stream, partitions, default)
    if options.starting_timestamp_ms is not None:
        option = "startingTimestamp"
        timestamps = dict.fromkeys(partitions, options.starting_timestamp_ms)
        strategy = options.timestamp_strategy or "latest"
    else:
        option = "startingOffsetsByTimestamp"
        timestamps = timestamps_for(option, options.starting_timestamps, partitions)
        strategy = options.timestamp_strategy or "error"
    return resolve(
        client, options, spec, hws, timestamps=timestamps, strategy=strategy, option=option
    )


def end_offsets(
    client: Client, options: SourceOptions, partitions: list[int], hws: Mapping[int, int]
) -> Offsets:
    """Where a batch read ends (exclusive) in each partition, from every ending option.

    ``endingTimestamp`` / ``endingOffsetsByTimestamp`` end before the first message
    received at or after the time, or at HW + 1 when there is none (Kafka's rule);
    ``endingOffsets`` (default latest) applies to the rest.

    Raises:
        ConfigurationError: an option is malformed, says earliest, or names a
            partition not read.
    """
    stream = options.stream
    spec = parse_spec("endingOffsets", options.ending_offsets, stream, partitions, LATEST)
    if EARLIEST in spec.values():
        raise ConfigurationError("option 'endingOffsets' may not be earliest (-2)")
    if options.ending_timestamp_ms is not None:
        timestamps = dict.fromkeys(partitions, options.ending_timestamp_ms)
    else:
        timestamps = timestamps_for(
            "endingOffsetsByTimestamp", options.ending_timestamps, partitions
        )
    return resolve(client, options, spec, hws, timestamps=timestamps, strategy="latest")


#: Key of the stream's creation time in streaming offsets, ``{CREATED: {stream: ns}}``:
#: another creation time than the checkpoint's means the stream was deleted and created
#: again, and the checkpointed offsets belong to the old log.
CREATED = "liftbridge.streamCreated"


def to_json_dict(
    stream: str, offsets: Mapping[int, int], created: int = 0
) -> dict[str, dict[str, int]]:
    """``{stream: {"<partition>": offset}}``: the checkpoint and progress format, plus
    ``{"liftbridge.streamCreated": {stream: ns}}`` when ``created`` (ns) is known."""
    result = {stream: {str(p): o for p, o in sorted(offsets.items())}}
    if created and stream != CREATED:
        result[CREATED] = {stream: created}
    return result


def created_of(stream: str, value: Mapping[str, object]) -> int:
    """The stream's creation time (ns) recorded in offsets by :func:`to_json_dict`; 0
    when they hold none (offsets written before it was recorded)."""
    inner = value.get(CREATED)
    found = inner.get(stream) if isinstance(inner, Mapping) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else 0


def from_json_dict(stream: str, value: Mapping[str, object]) -> Offsets:
    """Inverse of :func:`to_json_dict` (string keys, as Spark's checkpoint returns them).

    Raises:
        ConfigurationError: the checkpoint offset is for another stream.
    """
    inner = value.get(stream)
    if not isinstance(inner, Mapping):
        raise ConfigurationError(
            f"checkpointed offset {dict(value)!r} is not for stream {stream!r}; "
            "use a new checkpointLocation when changing the stream"
        )
    return {int(p): int(o) for p, o in inner.items()}
