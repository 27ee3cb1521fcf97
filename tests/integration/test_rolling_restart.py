"""Exact data through a rolling restart of a 3-node cluster, as at every upgrade.

Each of the 3 nodes in turn is stopped with SIGINT (v1.9.0's graceful stop) and started
again, and the next one only once it is back in the ISR of every partition (and, as a
fast restart never leaves it, has a publish acknowledged by ALL), while ONE client
serves a thread of pipelined ack-ALL ``publish_async`` calls and a thread calling
``publish()`` (3 partitions at replication factor 3), a subscriber per partition
reading from the start, and a consumer group of 2 members with auto-commit. The whole
cluster is replaced under it, metadata leader, group coordinator and ``__cursors``
leaders included. A node comes back at once ("fast": it keeps its leaderships) or once
others lead and replicate its partitions ("slow"); the publishers go on to the end
("busy") or stop before the last node goes ("quiet": nothing is committed after it).

Each run must end with every acknowledged message stored where its ack said, each
partition's offsets without a gap and read by the subscribers in order, every
acknowledged message delivered to the group, no call past its bound, no thread of the
client left running, and a new member of the group resuming after the committed
positions. v1.9.0 recovers a high watermark at restart from a checkpoint written every
5 s, not at shutdown, and serves reads and cursors only up to it: the quiet runs would
see a stale one (none did in the runs so far), the cursors are the client's concern
(``_transport.cursors.reveal_cursors``). Duplicates (re-sent publishes), re-deliveries to the
group, the longest stalls and the watermarks after the roll are printed (``pytest -s``).

Two server behaviours are told apart rather than failed: publishes that never reached a
new leader while it stored later ones time out (``lost_in_transit``: about one slow
busy run in six before the client re-sent them on that proof; none since), and a
``SetCursor`` to a ``__cursors`` leader just restarted that goes unanswered for
``rpc_timeout`` (seen holding auto-commits for 10 s) fails the final commit only if it
is that commit's own.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from liftbridge_sync import Ack, AckPolicy, AckTimeoutError, Client, Message, StartAt
from liftbridge_sync.consumer import group_cursor_id
from liftbridge_sync.testing import LiftbridgeCluster
from tests.constants import FAST_RECONNECT
from tests.waiting import wait_until

from ._members import Reader, undelivered_report
from ._publishers import Publishers, Subscribers, read_back
from ._rewrites import Where, judge_missing, overwritten_after_ack
from .conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

PARTITIONS = 3
#: Seconds of publishing after the last node is back.
AFTER = 2.0
#: Seconds past its timeout a ``get(0.2)`` may take (a resubscribe cut short, a slow
#: machine); a get held by a dial or a stale leader takes ``rpc_timeout`` or more.
GET_SLACK = 2.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LiftbridgeCluster]:
    # Short group timeouts, as in test_consumer_groups_cluster.py: a member finds the
    # coordinator the roll moves within seconds. No activity stream: a v1.9.0 metadata
    # leader (re)creates it on each promotion, and the roll promotes up to three.
    config = {"groups.consumer.timeout": "3s", "groups.coordinator.timeout": "2s"}
    with LiftbridgeCluster(size=3, config=config, activity=False) as c:
        yield c


def _ours() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("liftbridge-")}


def replicated_by_the_running(cluster: LiftbridgeCluster, streams: dict[str, int]) -> bool:
    """Whether each partition of ``streams`` (name: partitions) is led by a running
    node and has every running node, and only those, in its ISR."""
    running = {n.server_id for n in cluster.servers if n.running}
    try:
        response = cluster.metadata(list(streams))
    except LookupError:
        return False
    seen = 0
    for meta in response.streamMetadata:
        for info in meta.partitions.values():
            if info.leader not in running or set(info.isr) != running:
                return False
            seen += 1
    return seen == sum(streams.values())


def roll(cluster: LiftbridgeCluster, index: int, pace: str, watched: dict[str, int]) -> None:
    """Stop node ``index`` with SIGINT and start it again on its data; return once it
    is back in the ISR of every partition of ``watched``.

    ``"fast"``: the kit's restart, back before the others drop it from an ISR or take
    its leaderships (``clustering.replica.max.lag.time`` 2 s, ``max.leader.timeout``
    1 s). ``"slow"``: started only once its partitions are led and replicated without
    it, as when an upgrade takes a while.
    """
    if pace == "fast":
        cluster.restart(index, 60)
    else:
        cluster.stop_node(index)
        wait_until(
            lambda: replicated_by_the_running(cluster, watched),
            30,
            f"the partitions of node {index} led and replicated without it",
        )
        cluster.start_node(index, 60)
    wait_until(
        lambda: (
            len(cluster.servers) == sum(n.running for n in cluster.servers)
            and replicated_by_the_running(cluster, watched)
        ),
        60,
        f"node {index} back in every ISR",
    )


def lost_in_transit(
    failed: dict[bytes, BaseException], acks: dict[bytes, Ack | None], kept: set[bytes]
) -> str | None:
    """Why the failed ``publish_async`` calls were lost on their way to the leader, or
    ``None`` if they were not all provably so; fails the test over any other failure.

    Proof: each timed out (``AckTimeoutError``), is not in the log, and a publish of its
    partition sent after it (``a<n>`` are sent in the order of n) was stored and
    acknowledged: its leader took later messages while this one never reached it (a
    new leader not yet listening on the partition's NATS subject). Since the
    fourteenth session the client re-sends such publishes once its leader acknowledges
    a later one while their partition is probed (``_publishing/resending.py``); this
    xfail stays as the record of any that still time out (none in the runs since),
    until CI runs show it never fires and it can become a failure.
    """
    if not failed:
        return None
    others = [e for e in failed.values() if not isinstance(e, AckTimeoutError)]
    assert not others, f"{len(others)} publish_async failed, e.g. {others[:3]}"
    newest: dict[int, int] = {}
    for value in acks:
        if value.startswith(b"a"):
            n = int(value[1:])
            newest[n % PARTITIONS] = max(newest.get(n % PARTITIONS, -1), n)
    unproven = [
        v for v in failed if v in kept or newest.get(int(v[1:]) % PARTITIONS, -1) < int(v[1:])
    ]
    assert not unproven, (
        f"{len(failed)} publish_async timed out, {len(unproven)} of them stored or the "
        f"last of their partition, e.g. {sorted(unproven)[:5]}: {list(failed.values())[:3]}"
    )
    partitions = sorted({int(v[1:]) % PARTITIONS for v in failed})
    return (
        f"{len(failed)} publish_async timed out (e.g. {sorted(failed)[:3]}, partitions "
        f"{partitions}), none of them in the log, while later publishes of their "
        f"partitions were stored and acknowledged (up to {newest})"
    )


def longest_gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def judge_misplaced(acks: dict[bytes, Ack], log: dict[Where, Message]) -> None:
    """Fail over acknowledged values stored, but not where their ack said, unless the
    server provably wrote another message there after the ack: then xfail."""
    if not acks:
        return
    proofs = {value: overwritten_after_ack(ack, log) for value, ack in acks.items()}
    report = "; ".join(
        f"{v!r}: ack {acks[v].partition}/{acks[v].offset} holds "
        f"{getattr(log.get((acks[v].partition, acks[v].offset)), 'value', None)!r}"
        + (f" ({proofs[v]})" if proofs[v] else "")
        for v in sorted(acks)[:20]
    )
    if all(proofs.values()):
        pytest.xfail(f"v1.9.0 rewrote acknowledged offsets: {len(acks)} misplaced: {report}")
    pytest.fail(f"{len(acks)} acknowledged messages not where their ack said: {report}")


@pytest.mark.parametrize("ending", ["busy", "quiet"])
@pytest.mark.parametrize("pace", ["fast", "slow"])
def test_rolling_restart_of_every_node_keeps_data_exact(
    cluster: LiftbridgeCluster, pace: str, ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``ending="quiet"``: the publishers stop (every publish answered) before the last
    node goes, so nothing new is committed after it: a watermark it recovered stale
    would hide acknowledged messages from every reader."""
    cluster.heal(60)
    began = time.monotonic()
    before = _ours()
    stream, group = unique("roll"), unique("g")
    with Client(cluster.addresses, grpc_options=FAST_RECONNECT) as client:
        options = client.options
        client.create_stream(stream, stream, partitions=PARTITIONS, replication_factor=3)
        watched = {stream: PARTITIONS, "__cursors": 2}
        wait_until(
            lambda: replicated_by_the_running(cluster, watched), 30, "a whole ISR everywhere"
        )
        client.fetch_metadata(stream)
        start = StartAt.earliest()
        cycles: list[float] = []
        phases: dict[str, float] = {"start": time.monotonic()}
        markers: dict[bytes, Ack | None] = {}
        busy_until = cluster.size if ending == "busy" else cluster.size - 1
        with (
            Subscribers(client, stream, PARTITIONS) as subscribers,
            client.consumer(group, streams=[stream], auto_commit=0.3, start=start) as a,
            client.consumer(group, streams=[stream], auto_commit=0.3, start=start) as b,
        ):
            wait_until(
                lambda: (
                    len(a.assignment()) + len(b.assignment()) == PARTITIONS and a.epoch == b.epoch
                ),
                30,
                "both members reading",
            )
            readers = [Reader(a), Reader(b)]
            with Publishers(client, stream, PARTITIONS) as run:
                wait_until(lambda: len(run.done_at) >= 300, 30, "300 acknowledged publishes")
                for index in range(busy_until):
                    cycle = time.monotonic()
                    roll(cluster, index, pace, watched)
                    # In the ISR it may still be catching up (a fast restart never left
                    # it): acknowledged by ALL after that, it holds each partition up to
                    # there before the next node goes.
                    for p in range(PARTITIONS):
                        value = b"m%d-%d" % (index, p)
                        markers[value] = client.publish(
                            stream, value, partition=p, ack_policy=AckPolicy.ALL
                        )
                    cycles.append(time.monotonic() - cycle)
                run.stop.wait(AFTER if ending == "busy" else 0.0)
            outcomes = [f.exception(timeout=60) for f in run.futures]
            failed = {b"a%d" % i: e for i, e in enumerate(outcomes) if e is not None}
            for index in range(busy_until, cluster.size):
                cycle = time.monotonic()
                roll(cluster, index, pace, watched)
                cycles.append(time.monotonic() - cycle)
            phases["rolled"] = time.monotonic()
            watermarks = {}
            for p in range(PARTITIONS):
                info = client.fetch_partition_metadata(stream, p)
                watermarks[p] = (info.high_watermark, info.newest_offset)
            assert not run.sync_errors, f"publish() raised: {run.sync_errors[:3]}"
            offsets: dict[int, list[int]] = {}
            log: dict[Where, Message] = {}
            stored = read_back(client, stream, PARTITIONS, offsets, log)
            phases["read back"] = time.monotonic()
            # Every acknowledged message is stored where its ack said (a watermark
            # recovered stale would hide the newest: (watermark, newest offset) given).
            acks = run.acks_of({b"a%d" % i for i, e in enumerate(outcomes) if e is None})
            acks.update(run.sync_acks)
            acks.update(markers)
            assert all(ack is not None for ack in acks.values())  # AckPolicy.ALL
            kept = set(stored)
            lost = lost_in_transit(failed, acks, kept)
            try:
                judge_missing({v: ack for v, ack in acks.items() if v not in kept}, log)
            except pytest.fail.Exception as exc:
                pytest.fail(f"{exc}; (watermark, newest offset) after the roll {watermarks}")
            judge_misplaced(
                {
                    v: ack
                    for v, ack in acks.items()
                    if ack is not None
                    and getattr(log.get((ack.partition, ack.offset)), "value", None) != v
                },
                log,
            )
            # No gap in any partition, and the subscribers, reading all along, saw
            # every offset in order (once each).
            for partition, seen in offsets.items():
                assert seen == list(range(len(seen))), f"partition {partition} has a gap"
            last = {p: o[-1] if o else -1 for p, o in offsets.items()}
            subscribers.finish(last, timeout=30)
            phases["subscribed"] = time.monotonic()
            assert not subscribers.errors, subscribers.errors
            assert subscribers.offsets == offsets
            # The group delivered every acknowledged message, then every stored one.
            acked = set(acks)
            try:
                wait_until(
                    lambda: acked <= readers[0].values | readers[1].values,
                    60,
                    f"all {len(acked)} acknowledged messages delivered to the group",
                )
            except pytest.fail.Exception as exc:
                missing = acked - readers[0].values - readers[1].values
                report, rewritten = undelivered_report(
                    client, stream, PARTITIONS, missing, acks, readers, (a, b)
                )
                ended = [(r.ended, r.errors) for r in readers]
                summary = f"{exc}; {len(missing)} undelivered: {report}; readers {ended}"
                if rewritten and not any(r.ended or r.errors for r in readers):
                    pytest.xfail(f"v1.9.0 rewrote acked offsets: {summary}")
                pytest.fail(summary)
            wait_until(
                lambda: set(log) <= set(readers[0].positions) | set(readers[1].positions),
                30,
                "every stored message delivered to the group",
            )
            phases["group read"] = time.monotonic()
            for reader in readers:
                reader.stop()
            assert [r.errors for r in readers] == [[], []]
            assert not any(r.ended for r in readers)
            stats = (a.stats(), b.stats())
        phases["members closed"] = time.monotonic()
        # Closed: what the members stored reads back (v1.9.0 read cursors back older
        # after a restart: see cursors.reveal_cursors)...
        committed: dict[int, int] = {}
        for member in (a, b):
            for (_, p), offset in member.committed().items():
                committed[p] = max(committed.get(p, -1), offset)
        cursor_id = group_cursor_id(group)
        cursors = {p: client.fetch_cursor(cursor_id, stream, p) for p in range(PARTITIONS)}
        assert cursors == {p: committed.get(p, -1) for p in range(PARTITIONS)}, (
            f"the cursors read back {cursors} are not what the members stored {committed}"
        )
        # ... and they stored what they had read, the last message included, unless
        # the server did not answer the final commit's SetCursor in time.
        if cursors != last:
            refused = [
                r.getMessage()
                for r in caplog.records
                if "final commit failed" in r.getMessage()
                and "deadline exceeded" in r.getMessage().lower()
            ]
            where = (
                f"the cursors {cursors} are not where the group stopped reading {last}; "
                f"member stats {stats}"
            )
            if refused:
                pytest.xfail(f"v1.9.0 left SetCursor unanswered: {refused}; {where}")
            pytest.fail(where)
        # A new member resumes after the cursors: it reads what came since, not the rest.
        news = {p: [b"n%d-%d" % (p, i) for i in range(5)] for p in range(PARTITIONS)}
        for p, values in news.items():
            for value in values:
                client.publish(stream, value, partition=p, ack_policy=AckPolicy.ALL)
        fresh: list[Message] = []
        with client.consumer(group, streams=[stream], auto_commit=0.3, start=start) as c:
            want = {v for values in news.values() for v in values}

            def more() -> bool:
                try:
                    fresh.extend(c.get_many(100, 0.2))
                except TimeoutError:
                    pass
                return want <= {m.value for m in fresh}

            wait_until(more, 30, lambda: f"the new messages, got {len(fresh)} others")
        for p in range(PARTITIONS):
            got = [(m.offset, m.value) for m in fresh if m.partition == p]
            assert got == [(last[p] + 1 + i, v) for i, v in enumerate(news[p])], (
                f"partition {p}: a new member after cursor {cursors[p]} read "
                f"{[o for o, _ in got][:10]}"
            )
        phases["resumed"] = time.monotonic()
        assert client.publisher_stats().in_flight == 0
    assert not _ours() - before, f"threads left running: {_ours() - before}"
    # No call went past its bound: publish() waits for a slot (enqueue_timeout) and then
    # for its ack (ack_timeout); a get(0.2) returns within about 0.2 s.
    enqueue = options.enqueue_timeout or 0.0
    assert run.longest_publish < enqueue + options.ack_timeout + 1.0, run.longest_publish
    assert subscribers.longest_get < 0.2 + GET_SLACK, subscribers.longest_get
    assert max(r.longest_get for r in readers) < 0.2 + GET_SLACK
    # Only re-sent publishes are stored twice: every value stored was published.
    assert kept <= set(acks) | {b"a%d" % i for i in range(len(run.futures))}
    duplicates = len(stored) - len(kept)
    redelivered = sum(
        n - 1 for n in Counter(readers[0].positions + readers[1].positions).values() if n > 1
    )
    stalls = {p: round(longest_gap(t), 2) for p, t in subscribers.arrived_at.items()}
    marks = list(phases.items())
    steps = {b[0]: round(b[1] - a[1], 1) for a, b in zip(marks, marks[1:], strict=False)}
    steps["test"] = round(time.monotonic() - began, 1)
    print(  # noqa: T201 - the figures the report asks for (pytest -s)
        f"\nrolling restart {pace} {ending}: cycles {[round(c, 1) for c in cycles]} s; "
        f"{len(run.futures)} publish_async ({len(failed)} failed) + "
        f"{len(run.sync_acks)} publish(); "
        f"{duplicates} duplicates stored; {redelivered} re-deliveries to the group; "
        f"longest publish stall {run.longest_stall():.2f}s, publish() "
        f"{run.longest_publish:.2f}s, subscriber stalls {stalls}, longest get "
        f"{subscribers.longest_get:.2f}s / group {max(r.longest_get for r in readers):.2f}s; "
        f"(watermark, newest) after the roll {watermarks}; member stats {stats}; "
        f"phases {steps} s"
    )
    if lost:
        pytest.xfail(f"publishes lost in transit and not re-sent: {lost}")
