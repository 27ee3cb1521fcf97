"""What a sink task reports it published: counts and acked offset ranges."""

from __future__ import annotations

from liftbridge_sync.errors import AckTimeoutError
from liftbridge_sync.models import Ack, AckPolicy
from liftbridge_sync.spark.sending import PublishSummary


def ack(stream: str, partition: int, offset: int) -> Ack:
    return Ack(
        stream=stream,
        partition=partition,
        partition_subject=stream,
        message_subject=stream,
        offset=offset,
        ack_inbox="",
        correlation_id=f"c{offset}",
        ack_policy=AckPolicy.LEADER,
        reception_timestamp_ns=0,
        commit_timestamp_ns=0,
        ack_error=None,
    )


def test_a_run_widens_each_partitions_range_and_counts_every_publish() -> None:
    summary = PublishSummary()
    run = [ack("a", 0, 5), ack("a", 0, 6), None, ack("a", 1, 9), ack("b", 0, 2)]
    run += [ack("a", 0, 3), ack("a", 1, 8), ack("a", 0, 7)]  # out of order after failover
    assert summary.add_outcomes(run) is None
    summary.add(ack("b", 0, 1))
    summary.add(None)
    assert summary.count == 10
    assert summary.acked == {"a": {0: [3, 7], 1: [8, 9]}, "b": {0: [1, 2]}}


def test_a_run_stops_counting_at_its_first_failure_and_returns_it() -> None:
    summary = PublishSummary()
    first, second = AckTimeoutError("no ack"), AckTimeoutError("later")
    failure = summary.add_outcomes([ack("a", 0, 1), None, first, ack("a", 0, 2), second])
    assert failure is first
    assert summary.count == 2
    assert summary.acked == {"a": {0: [1, 1]}}
    assert summary.add_outcomes([]) is None and summary.count == 2
