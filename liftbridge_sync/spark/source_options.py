"""The ``liftbridge`` data source's options, parsed and checked once on the planner.

Spark passes options as strings under case-insensitive keys. :class:`SourceOptions`
holds the typed, validated values; unknown options are refused with an error naming
them, so a typo such as ``startingOffset`` never passes silently.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping

from liftbridge_sync import ClientOptions, ConfigurationError
from liftbridge_sync.spark.config import (
    CLIENT_OPTIONS,
    client_options,
    get_bool,
    get_duration,
    get_int,
    get_millis,
    load_json,
    lower_keys,
    parse_integer,
    parse_partition_key,
    stream_option,
)

__all__ = [
    "BATCH_ONLY_OPTIONS",
    "KAFKA_OPTIONS",
    "READ_NAMES",
    "READ_OPTIONS",
    "STREAM_ONLY_OPTIONS",
    "SourceOptions",
    "TIMESTAMP_STRATEGIES",
    "WRITE_NAMES",
    "WRITE_OPTIONS",
    "check_known",
]

#: Read options refused by ``readStream`` (a streaming query has no end).
BATCH_ONLY_OPTIONS = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")

#: Read options refused by a batch ``read`` (there are no triggers).
STREAM_ONLY_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")

#: What ``startingOffsetsByTimestampStrategy`` accepts (Kafka's values).
TIMESTAMP_STRATEGIES = ("error", "latest")

#: Options the reader understands, as the docs spell them.
READ_NAMES = (
    "brokers",
    "stream",
    "path",
    "partitions",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "maxRecordsPerPartition",
    "minPartitions",
    "includeHeaders",
    "failOnDataLoss",
    "readISRReplica",
    "resumePaused",
    "pollTimeoutMs",
)

#: Options the writer understands, as the docs spell them; Spark adds
#: ``checkpointLocation``.
WRITE_NAMES = (
    "brokers",
    "stream",
    "path",
    "partitioner",
    "ackPolicy",
    "maxInFlight",
    "ackTimeoutMs",
    "checkpointLocation",
)

#: Options the reader understands (lower case).
READ_OPTIONS = frozenset(name.lower() for name in READ_NAMES)

#: Options the writer understands (lower case).
WRITE_OPTIONS = frozenset(name.lower() for name in WRITE_NAMES)

_SPELLING = {name.lower(): name for name in (*READ_NAMES, *WRITE_NAMES)}

_NO_GROUP = "no group: a query's offsets are kept in its checkpoint"

#: The Kafka connector's options (lower case) that have no near spelling here, with what
#: takes their place; a user moving a query over gets that, not only the list of names.
KAFKA_OPTIONS: Mapping[str, str] = {
    "kafka.bootstrap.servers": "here it is 'brokers' (host:port,...)",
    "subscribe": "here it is 'stream' or load(name), one stream a query",
    "topic": "here it is 'stream' or save(name) (or a 'stream' column)",
    "assign": "here they are 'stream' and 'partitions'",
    "subscribepattern": "here it is 'stream': one stream a query, no pattern",
    "kafka.group.id": _NO_GROUP,
    "groupidprefix": _NO_GROUP,
}


def check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    """Refuse any option not in ``known`` nor a ``liftbridge.*`` passthrough.

    Args:
        what: ``"read"`` or ``"write"``.

    Raises:
        ConfigurationError: naming the first option refused: one of the other kind
            (a write option on a read, a read option on a write) is said to be so; one
            of the Kafka connector's with what takes its place (:data:`KAFKA_OPTIONS`,
            ``kafka.*``); any other is unknown, with the known ones and the nearest
            spelling.
    """
    for key in options:
        if key in known or key in CLIENT_OPTIONS:
            continue
        if key.startswith("liftbridge."):
            continue  # client_options() names unknown liftbridge.* options itself
        if key in _SPELLING:
            other = "write" if what == "read" else "read"
            raise ConfigurationError(
                f"option {_SPELLING[key]!r} is for {other}s only; remove it from this {what}"
            )
        instead = KAFKA_OPTIONS.get(key)
        if instead is None and key.startswith("kafka."):
            instead = "the client's settings here are liftbridge.* options"
        if instead is not None:
            raise ConfigurationError(
                f"unknown {what} option {key!r}: that is the Kafka connector's; {instead} "
                "(see the README's Spark section)"
            )
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
        hint = f" (did you mean {_SPELLING[close[0]]!r}?)" if close else ""
        raise ConfigurationError(
            f"unknown {what} option {key!r}{hint}; known: "
            f"{', '.join(_SPELLING[name] for name in sorted(known))}, liftbridge.*"
        )


def _partitions(raw: str | None, stream: str) -> tuple[int, ...] | None:
    if raw is None:
        return None
    text = raw.strip()
    example = f"'0,2' or '{{\"{stream}\": [0, 2]}}'"
    if not text:
        # Kafka's 'assign' refuses an empty list too: reading every partition instead
        # would be a silent surprise.
        raise ConfigurationError(
            f"option 'partitions' is empty: list partition ids like {example}, or leave "
            "the option out to read every partition"
        )
    parsed = (
        load_json("partitions", text, f"JSON like {example}")
        if text.startswith(("{", "["))
        else None
    )
    if isinstance(parsed, dict):
        if set(parsed) != {stream}:
            raise ConfigurationError(
                f"option 'partitions' must name stream {stream!r} only, got {sorted(parsed)}"
            )
        parsed = parsed[stream]
    items = parsed if isinstance(parsed, list) else text.split(",")
    ids_given: set[int] = set()
    for item in items:
        found = item if type(item) is int else parse_integer(item) if type(item) is str else None
        if found is None:
            raise ConfigurationError(
                f"option 'partitions' must list partition ids, e.g. {example}, got {raw!r}"
            )
        ids_given.add(found)
    ids = tuple(sorted(ids_given))
    if not ids or ids[0] < 0:
        raise ConfigurationError(f"option 'partitions' must list ids >= 0, got {raw!r}")
    return ids


def _timestamps(option: str, raw: str | None, stream: str) -> tuple[tuple[int, int], ...] | None:
    """Kafka's per-partition timestamps, ``{"orders": {"0": 1700000000000}}``, as pairs.

    Which partitions exist is checked when the read is planned.
    """
    if raw is None:
        return None
    example = f'\'{{"{stream}": {{"0": 1700000000000, "1": 1700000000000}}}}\''
    parsed = load_json(option, raw, f"JSON like {example}")
    if (
        not isinstance(parsed, dict)
        or set(parsed) != {stream}
        or not isinstance(parsed[stream], dict)
    ):
        raise ConfigurationError(
            f"option {option!r} must map the stream {stream!r} to partition timestamps "
            f"(epoch ms), like {example}; got {raw!r}"
        )
    pairs: list[tuple[int, int]] = []
    for key, value in parsed[stream].items():
        partition = parse_partition_key(key)
        if partition is None or partition < 0:
            raise ConfigurationError(f"option {option!r}: {key!r} is not a partition id")
        if any(partition == seen for seen, _ in pairs):
            raise ConfigurationError(f"option {option!r} names partition {partition} twice")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(
                f"option {option!r}: the timestamp of partition {partition} must be epoch "
                f"milliseconds (an int >= 0), got {value!r}"
            )
        pairs.append((partition, value))
    if not pairs:
        raise ConfigurationError(f"option {option!r} names no partition; like {example}")
    return tuple(sorted(pairs))


def _strategy(raw: str | None, starting: bool) -> str | None:
    if raw is None:
        return None
    text = str(raw).strip().lower()
    if text not in TIMESTAMP_STRATEGIES:
        raise ConfigurationError(
            f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {raw!r}"
        )
    if not starting:
        raise ConfigurationError(
            "option 'startingOffsetsByTimestampStrategy' applies only with "
            "'startingOffsetsByTimestamp' or 'startingTimestamp'"
        )
    return text


def _exclusive(lowered: Mapping[str, str], first: str, second: str) -> None:
    if first.lower() in lowered and second.lower() in lowered:
        raise ConfigurationError(
            f"options {first!r} and {second!r} both say where to "
            f"{'start' if first.startswith('start') else 'end'}; give one"
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    """Validated read options of the ``liftbridge`` source. Immutable and picklable.

    Attributes:
        client: Options of the per-process client (``brokers`` plus ``liftbridge.*``).
        stream: The stream to read (option ``stream`` or the ``load()`` path).
        partitions: Partition ids to read, ``None`` for all.
        starting_offsets: ``"earliest"``, ``"latest"`` or a JSON string, ``None`` when
            not given (batch default earliest, streaming default latest).
        ending_offsets: ``"latest"`` or a JSON string (batch only).
        starting_timestamp_ms: Start at the first message received at or after this
            Unix time in milliseconds (overrides ``starting_offsets``).
        starting_timestamps: ``(partition, epoch ms)`` pairs: those partitions start at
            their first message received at or after the time (overrides
            ``starting_offsets`` for them).
        timestamp_strategy: What a start timestamp that matches no message does:
            ``"error"`` fails the read, ``"latest"`` starts at the high watermark + 1.
            ``None`` when not given: ``"error"`` for ``starting_timestamps`` (Kafka's
            default), ``"latest"`` for ``starting_timestamp_ms``.
        ending_timestamp_ms: Batch reads end before the first message received at or
            after this time (exclusive; the high watermark + 1 when none is).
        ending_timestamps: Per-partition ending timestamps, as ``starting_timestamps``.
        max_offsets_per_trigger: Row budget per micro-batch, ``None`` for no limit.
        min_offsets_per_trigger: A micro-batch waits until this many offsets are
            available, or ``max_trigger_delay`` passed since the last one.
        max_trigger_delay: Seconds a micro-batch waits for ``min_offsets_per_trigger``.
        max_records_per_partition: Split ranges bigger than this into several Spark
            partitions (``0``: one Spark partition per Liftbridge partition).
        min_partitions: Least number of Spark partitions of a read (``0``: one per
            Liftbridge partition, or as ``max_records_per_partition`` cuts them).
        include_headers: Add the ``headers`` column.
        fail_on_data_loss: Fail when offsets to be read were deleted (retention).
        read_isr_replica: Read from a random in-sync replica instead of the leader.
        resume_paused: Resume a paused partition the read needs (its subscriptions ask
            the server to, as ``subscribe(resume=True)``); without it such a read fails
            with :class:`~liftbridge_sync.errors.PartitionPausedError` naming the option.
        poll_timeout: Seconds a reading task waits for the next message of its range.
    """

    client: ClientOptions
    stream: str
    partitions: tuple[int, ...] | None = None
    starting_offsets: str | None = None
    ending_offsets: str = "latest"
    starting_timestamp_ms: int | None = None
    starting_timestamps: tuple[tuple[int, int], ...] | None = None
    timestamp_strategy: str | None = None
    ending_timestamp_ms: int | None = None
    ending_timestamps: tuple[tuple[int, int], ...] | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay: float = 900.0
    max_records_per_partition: int = 0
    min_partitions: int = 0
    include_headers: bool = False
    fail_on_data_loss: bool = True
    read_isr_replica: bool = False
    resume_paused: bool = False
    poll_timeout: float = 120.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's string options.

        Raises:
            ConfigurationError: an option is unknown, missing or invalid (named).
        """
        lowered = lower_keys(options)
        check_known(lowered, READ_OPTIONS, "read")
        stream = (stream_option(lowered) or "").strip()
        if not stream:
            raise ConfigurationError(
                "option 'stream' is required: .option('stream', 'orders') or .load('orders')"
            )
        max_per_trigger = get_int(lowered, "maxOffsetsPerTrigger", 0, minimum=1)
        min_per_trigger = get_int(lowered, "minOffsetsPerTrigger", 0, minimum=1)
        if "maxtriggerdelay" in lowered and not min_per_trigger:
            raise ConfigurationError(
                "option 'maxTriggerDelay' applies only with 'minOffsetsPerTrigger'"
            )
        if min_per_trigger and max_per_trigger and min_per_trigger > max_per_trigger:
            raise ConfigurationError(
                f"option 'minOffsetsPerTrigger' ({min_per_trigger}) is above option "
                f"'maxOffsetsPerTrigger' ({max_per_trigger})"
            )
        _exclusive(lowered, "startingTimestamp", "startingOffsetsByTimestamp")
        _exclusive(lowered, "endingTimestamp", "endingOffsetsByTimestamp")
        timestamp = get_int(lowered, "startingTimestamp", -1, minimum=0)
        ending_timestamp = get_int(lowered, "endingTimestamp", -1, minimum=0)
        starting_by = _timestamps(
            "startingOffsetsByTimestamp", lowered.get("startingoffsetsbytimestamp"), stream
        )
        return cls(
            client=client_options(lowered.get("brokers"), lowered),
            stream=stream,
            partitions=_partitions(lowered.get("partitions"), stream),
            starting_offsets=lowered.get("startingoffsets"),
            ending_offsets=lowered.get("endingoffsets", "latest"),
            starting_timestamp_ms=timestamp if timestamp >= 0 else None,
            starting_timestamps=starting_by,
            timestamp_strategy=_strategy(
                lowered.get("startingoffsetsbytimestampstrategy"),
                starting=timestamp >= 0 or starting_by is not None,
            ),
            ending_timestamp_ms=ending_timestamp if ending_timestamp >= 0 else None,
            ending_timestamps=_timestamps(
                "endingOffsetsByTimestamp", lowered.get("endingoffsetsbytimestamp"), stream
            ),
            max_offsets_per_trigger=max_per_trigger or None,
            min_offsets_per_trigger=min_per_trigger or None,
            max_trigger_delay=get_duration(lowered, "maxTriggerDelay", 900.0),
            max_records_per_partition=get_int(lowered, "maxRecordsPerPartition", 0),
            min_partitions=get_int(lowered, "minPartitions", 0, minimum=1)
            if "minpartitions" in lowered
            else 0,
            include_headers=get_bool(lowered, "includeHeaders", False),
            fail_on_data_loss=get_bool(lowered, "failOnDataLoss", True),
            read_isr_replica=get_bool(lowered, "readISRReplica", False),
            resume_paused=get_bool(lowered, "resumePaused", False),
            poll_timeout=get_millis(lowered, "pollTimeoutMs", 120_000.0),
        )
