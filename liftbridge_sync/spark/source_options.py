"""The ``liftbridge`` data source's options, parsed and checked once on the planner.

Spark passes options as strings under case-insensitive keys. :class:`SourceOptions`
holds the typed, validated values; unknown options are refused with an error naming
them, so a typo such as ``startingOffset`` never passes silently.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from liftbridge_sync import ClientOptions, ConfigurationError
from liftbridge_sync.spark.config import (
    CLIENT_OPTIONS,
    client_options,
    get_bool,
    get_int,
    get_millis,
    lower_keys,
)

__all__ = [
    "BATCH_ONLY_OPTIONS",
    "READ_OPTIONS",
    "STREAM_ONLY_OPTIONS",
    "SourceOptions",
    "WRITE_OPTIONS",
    "check_known",
]

#: Read options refused by ``readStream`` (a streaming query has no end).
BATCH_ONLY_OPTIONS = ("endingOffsets",)

#: Read options refused by a batch ``read`` (there are no triggers).
STREAM_ONLY_OPTIONS = ("maxOffsetsPerTrigger",)

#: Options the reader understands (lower case).
READ_OPTIONS = frozenset(
    {
        "brokers",
        "stream",
        "path",
        "partitions",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "maxoffsetspertrigger",
        "maxrecordsperpartition",
        "minpartitions",
        "includeheaders",
        "failondataloss",
        "readisrreplica",
        "polltimeoutms",
    }
)

#: Options the writer understands (lower case); Spark adds ``checkpointLocation``.
WRITE_OPTIONS = frozenset(
    {
        "brokers",
        "stream",
        "path",
        "partitioner",
        "ackpolicy",
        "maxinflight",
        "acktimeoutms",
        "checkpointlocation",
    }
)


def check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    """Refuse any option not in ``known`` nor a ``liftbridge.*`` passthrough.

    Raises:
        ConfigurationError: naming the first unknown option and the known ones.
    """
    for key in options:
        if key in known or key in CLIENT_OPTIONS:
            continue
        if key.startswith("liftbridge."):
            continue  # client_options() names unknown liftbridge.* options itself
        raise ConfigurationError(
            f"unknown {what} option {key!r}; known: {', '.join(sorted(known))}, liftbridge.*"
        )


def _partitions(raw: str | None, stream: str) -> tuple[int, ...] | None:
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        parsed = json.loads(text) if text.startswith(("{", "[")) else None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"option 'partitions' is not valid JSON: {exc}") from None
    if isinstance(parsed, dict):
        if set(parsed) != {stream}:
            raise ConfigurationError(
                f"option 'partitions' must name stream {stream!r} only, got {sorted(parsed)}"
            )
        parsed = parsed[stream]
    items = parsed if isinstance(parsed, list) else text.split(",")
    try:
        ids = tuple(sorted({int(str(item).strip()) for item in items}))
    except ValueError:
        raise ConfigurationError(
            f"option 'partitions' must list partition ids, e.g. '0,2' or "
            f"'{{\"{stream}\": [0, 2]}}', got {raw!r}"
        ) from None
    if not ids or ids[0] < 0:
        raise ConfigurationError(f"option 'partitions' must list ids >= 0, got {raw!r}")
    return ids


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
        max_offsets_per_trigger: Row budget per micro-batch, ``None`` for no limit.
        max_records_per_partition: Split ranges bigger than this into several Spark
            partitions (``0``: one Spark partition per Liftbridge partition).
        min_partitions: Least number of Spark partitions of a read (``0``: one per
            Liftbridge partition, or as ``max_records_per_partition`` cuts them).
        include_headers: Add the ``headers`` column.
        fail_on_data_loss: Fail when offsets to be read were deleted (retention).
        read_isr_replica: Read from a random in-sync replica instead of the leader.
        poll_timeout: Seconds a reading task waits for the next message of its range.
    """

    client: ClientOptions
    stream: str
    partitions: tuple[int, ...] | None = None
    starting_offsets: str | None = None
    ending_offsets: str = "latest"
    starting_timestamp_ms: int | None = None
    max_offsets_per_trigger: int | None = None
    max_records_per_partition: int = 0
    min_partitions: int = 0
    include_headers: bool = False
    fail_on_data_loss: bool = True
    read_isr_replica: bool = False
    poll_timeout: float = 120.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's string options.

        Raises:
            ConfigurationError: an option is unknown, missing or invalid (named).
        """
        lowered = lower_keys(options)
        check_known(lowered, READ_OPTIONS, "read")
        stream = (lowered.get("stream") or lowered.get("path") or "").strip()
        if not stream:
            raise ConfigurationError(
                "option 'stream' is required: .option('stream', 'orders') or .load('orders')"
            )
        max_per_trigger = get_int(lowered, "maxOffsetsPerTrigger", 0, minimum=1)
        timestamp = get_int(lowered, "startingTimestamp", -1, minimum=0)
        return cls(
            client=client_options(lowered.get("brokers"), lowered),
            stream=stream,
            partitions=_partitions(lowered.get("partitions"), stream),
            starting_offsets=lowered.get("startingoffsets"),
            ending_offsets=lowered.get("endingoffsets", "latest"),
            starting_timestamp_ms=timestamp if timestamp >= 0 else None,
            max_offsets_per_trigger=max_per_trigger or None,
            max_records_per_partition=get_int(lowered, "maxRecordsPerPartition", 0),
            min_partitions=get_int(lowered, "minPartitions", 0, minimum=1)
            if "minpartitions" in lowered
            else 0,
            include_headers=get_bool(lowered, "includeHeaders", False),
            fail_on_data_loss=get_bool(lowered, "failOnDataLoss", True),
            read_isr_replica=get_bool(lowered, "readISRReplica", False),
            poll_timeout=get_millis(lowered, "pollTimeoutMs", 120_000.0),
        )
