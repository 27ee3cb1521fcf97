"""A consumer's positions: what counts as processed when partitions move (no server).

The race these pin down: the iterator hands out a message, then the partition is taken
away (or the server drops the member) and given back before the next read. Another
member may have moved the cursor on meanwhile, so the old delivery must not count as
processed: committing it would move the cursor back.
"""

from __future__ import annotations

import threading
import types
from typing import Any, cast

import pytest

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.consumer import _commits
from liftbridge_sync.consumer._commits import Commits
from liftbridge_sync.consumer._mailbox import Mailbox, PartitionReader
from liftbridge_sync.consumer._readers import Readers
from liftbridge_sync.consumer._stats import Counters
from liftbridge_sync.errors import BrokerUnavailableError, CommitError, DeadlineExceededError
from liftbridge_sync.models import Message
from liftbridge_sync.positions import StartAt
from tests.messages import make_message

KEY = ("orders", 0)


@pytest.fixture(autouse=True)
def _cursors_of_the_fake_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commits store cursors through the fake cores below, not over RPCs."""
    fake = types.SimpleNamespace(
        set_cursor=lambda core, *args: core.set_cursor(*args),
        set_cursor_once=lambda core, *args: core.set_cursor_once(*args),
        fetch_cursor=lambda core, *args, abort=None: core.fetch_cursor(*args),
    )
    monkeypatch.setattr(_commits, "cursors", fake)


class _Core:
    """Records the cursors stored."""

    def __init__(self) -> None:
        self.cursors: list[tuple[str, int, int]] = []
        self.options = types.SimpleNamespace(rpc_timeout=1.0)  # readers' joins

    def set_cursor(self, cursor_id: str, stream: str, partition: int, offset: int) -> None:
        self.cursors.append((stream, partition, offset))


def _message(offset: int) -> Message:
    return make_message(offset, partition=KEY[1], stream=KEY[0], subject=KEY[0])


class _Member:
    """A consumer's commits and readers, wired as the consumer wires them."""

    def __init__(self, *, commit_on_revoke: bool = False) -> None:
        self.lock = threading.Lock()
        self.core = _Core()
        self.commits = Commits(cast(Any, self.core), "__group:g", self.lock)
        self.readers = Readers(
            cast(Any, self.core),
            "g",
            "member-1",
            StartAt.earliest(),
            lock=self.lock,
            stop=threading.Event(),
            mailbox=Mailbox(10),
            membership=cast(Any, types.SimpleNamespace(epoch=0, consumer_timeout=2.0)),
            commits=self.commits,
            counters=Counters(),
            commit_on_revoke=commit_on_revoke,
        )

    def reading(self, reader: PartitionReader) -> None:
        """``reader`` reads its partition (as :meth:`Readers.reconcile` starts one)."""
        with self.lock:
            self.readers._readers[(reader.stream, reader.partition)] = reader

    def deliver(self, reader: PartitionReader, offset: int) -> None:
        """The iterator handed out ``offset`` (``Consumer.get_many``)."""
        with self.lock:
            self.commits.delivered([(reader, _message(offset))])

    def next_read_and_commit(self) -> dict[tuple[str, int], int]:
        """The next read marks the delivery processed; then ``Consumer.commit``."""
        self.commits.mark_processed(self.readers)
        with self.lock:
            keys = list(self.readers)
        return self.commits.commit(keys)


def _assignment(*partitions: int) -> api_pb2.PartitionAssignment:
    return api_pb2.PartitionAssignment(stream=KEY[0], partitions=list(partitions))


def test_a_delivery_counts_while_its_partition_stays_assigned() -> None:
    member = _Member()
    reader = PartitionReader(*KEY, epoch=1)
    member.reading(reader)
    member.deliver(reader, 10)
    assert member.next_read_and_commit() == {KEY: 10}
    assert member.core.cursors == [("orders", 0, 10)]


def test_a_partition_taken_away_and_given_back_before_the_next_read() -> None:
    member = _Member()
    old = PartitionReader(*KEY, epoch=1)
    member.reading(old)
    member.deliver(old, 10)
    assert member.readers.reconcile([], epoch=2)  # taken away
    assert old.stopped and old.released
    member.reading(PartitionReader(*KEY, epoch=3))  # given back, a new reader
    assert member.next_read_and_commit() == {}
    assert member.core.cursors == []
    with member.lock:
        assert member.commits.delivered_positions() == {}


def test_a_member_dropped_by_the_server_and_assigned_the_partition_again() -> None:
    member = _Member()
    old = PartitionReader(*KEY, epoch=1)
    member.reading(old)
    with member.lock:  # Standing.rejoin's critical section
        dropped = member.readers.drop_all("member-2")
        member.commits.clear()
    assert dropped == [old] and old.stopped and old.released
    # A get_many() that took the message before the rejoin records it only now.
    member.deliver(old, 10)
    member.reading(PartitionReader(*KEY, epoch=4))
    assert member.next_read_and_commit() == {}
    assert member.core.cursors == []


def test_a_failed_reader_restarted_on_a_partition_still_assigned_keeps_its_delivery() -> None:
    member = _Member()
    failed = PartitionReader(*KEY, epoch=1, failed=True)
    member.reading(failed)
    member.deliver(failed, 10)
    # The assignment still holds the partition: the reader is only restarted. The new
    # one is started by reconcile; here it is put in place by hand (no thread).
    with member.lock:
        member.readers._readers.pop(KEY)
    member.reading(PartitionReader(*KEY, epoch=1))
    assert not failed.released
    assert member.next_read_and_commit() == {KEY: 10}


def test_reconcile_releases_only_the_partitions_taken_away() -> None:
    member = _Member()
    restarted = PartitionReader("orders", 1, epoch=1, failed=True)  # still ours
    kept = PartitionReader("orders", 2, epoch=1)
    gone = PartitionReader(*KEY, epoch=1)
    for reader in (restarted, kept, gone):
        member.reading(reader)
    queued = _message(7)
    assert member.readers._mailbox.put(restarted, queued)  # before it failed
    started: list[PartitionReader] = []
    # The restarted partition's new reader gets a thread that only notes it started.
    member.readers._read = started.append  # type: ignore[method-assign,assignment]
    assert member.readers.reconcile([_assignment(1, 2)], epoch=2)
    assert gone.released and gone.stopped
    assert not restarted.released and restarted.stopped
    assert not kept.released and not kept.stopped
    with member.lock:
        new = member.readers._readers[("orders", 1)]
    assert new is not restarted
    assert new.thread is not None
    new.thread.join(5)
    assert started == [new]
    # What the failed reader queued goes out as the new reader's (dropped with it if
    # the partition is taken away or the member dropped).
    assert member.readers._mailbox.peek(1, 0) == [(new, queued)]


def test_a_restarted_readers_delivery_is_released_with_the_partition() -> None:
    """A failed reader is restarted; the message it handed out before is still being
    processed when the partition is taken away and given back. Its new owner meanwhile
    may have moved the cursor on: the old delivery must not count, as for any other."""
    member = _Member()
    started: list[PartitionReader] = []
    member.readers._read = started.append  # type: ignore[method-assign,assignment]
    failed = PartitionReader(*KEY, epoch=1, failed=True)
    member.reading(failed)
    member.deliver(failed, 10)  # handed out, not processed yet
    assert member.readers.reconcile([_assignment(0)], epoch=1)  # restarted
    assert member.readers.reconcile([], epoch=2)  # taken away
    member.reading(PartitionReader(*KEY, epoch=3))  # given back, a new reader
    assert member.next_read_and_commit() == {}
    assert member.core.cursors == []


def test_a_reader_that_lost_a_race_to_a_newer_epoch_counts_for_nothing() -> None:
    """Another member read the partition at a newer epoch (and may have committed past
    what this reader delivered); the partition may come back before the next poll. A
    commit meanwhile, on revoke or by auto-commit, must not move the cursor back."""
    member = _Member()
    member.readers._commit_on_revoke = True
    reader = PartitionReader(*KEY, epoch=1)
    member.reading(reader)
    member.deliver(reader, 7)
    member.commits.mark_processed(member.readers)  # 7 processed, not committed
    member.deliver(reader, 8)
    member.readers._lost_race(reader, "the server ended the stream")
    assert reader.failed and reader.stopped and reader.released
    assert member.next_read_and_commit() == {}  # auto-commit before the poll
    started: list[PartitionReader] = []
    member.readers._read = started.append  # type: ignore[method-assign,assignment]
    assert member.readers.reconcile([_assignment(0)], epoch=3)  # still ours: restarted
    assert member.core.cursors == []  # commit on revoke left it alone
    with member.lock:
        restarted = member.readers._readers[KEY]
        assert member.commits.delivered_positions() == {}
    assert restarted is not reader and restarted.thread is not None
    restarted.thread.join(5)
    assert started == [restarted]


def test_a_member_dropped_for_good_stops_its_readers_and_raises() -> None:
    """Without a rejoin, the server's verdict ends the membership: the server does not
    end the dropped member's streams, so its readers must stop, their queued messages
    must not go out before the error, and nothing of theirs may be committed."""
    from liftbridge_sync import Client
    from liftbridge_sync.consumer import Consumer
    from liftbridge_sync.errors import NotGroupMemberError

    with Client("127.0.0.1:1") as client:  # never connects
        consumer = Consumer(client._core, "g", ["orders"], auto_commit=None, rejoin=False)
        reader = PartitionReader(*KEY, epoch=1)
        with consumer._lock:
            consumer._readers._readers[KEY] = reader
        assert consumer._mailbox.put(reader, _message(5))
        consumer._standing.fail(NotGroupMemberError("dropped by the server"))
        assert reader.stopped and reader.released
        with pytest.raises(NotGroupMemberError):
            consumer.get(0.5)
        with pytest.raises(NotGroupMemberError):  # nothing committed: not {} as if idle
            consumer.commit()
        assert consumer.committed() == {}
        consumer.close()


def test_auto_commit_waits_while_the_coordinator_doubts_the_membership() -> None:
    """The coordinator says this member does not exist; the heartbeat waits a consumer
    timeout before it believes it. If the server did drop it, its partitions are
    another member's: an auto-commit meanwhile could move their cursors back."""
    from liftbridge_sync import Client
    from liftbridge_sync.consumer import Consumer

    with Client("127.0.0.1:1") as client:  # never connects
        consumer = Consumer(client._core, "g", ["orders"], auto_commit=1.0)
        core = _Core()
        consumer._commits._core = cast(Any, core)
        reader = PartitionReader(*KEY, epoch=1)
        with consumer._lock:
            consumer._readers._readers[KEY] = reader
            consumer._commits.delivered([(reader, _message(10))])
        consumer._commits.mark_processed(consumer._readers)
        consumer._membership.in_doubt = True
        consumer._autocommit.commit_once()
        assert core.cursors == []
        consumer._membership.in_doubt = False  # the next poll answered
        consumer._autocommit.commit_once()
        assert core.cursors == [("orders", 0, 10)]


def test_the_heartbeat_doubts_while_the_coordinator_denies_the_member() -> None:
    from liftbridge_sync import Client
    from liftbridge_sync.consumer import Consumer
    from liftbridge_sync.errors import NotGroupMemberError

    with Client("127.0.0.1:1") as client:  # never connects
        consumer = Consumer(client._core, "g", ["orders"], auto_commit=None)
        membership = consumer._membership
        membership._interval = 0.01
        stop = threading.Event()
        seen: list[bool] = []
        answers = iter([NotGroupMemberError("not a member"), None])

        def fetch(timeout: float | None = None) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
            seen.append(membership.in_doubt)
            answer = next(answers)
            if answer is not None:
                raise answer
            return api_pb2.FetchConsumerGroupAssignmentsResponse(epoch=2)

        def reconcile(assignments: object, epoch: int) -> None:
            seen.append(membership.in_doubt)
            stop.set()

        membership.poll = fetch  # type: ignore[method-assign]
        thread = threading.Thread(
            target=membership.heartbeat, args=(stop, reconcile, lambda exc: None, None)
        )
        thread.start()
        thread.join(10)
        assert not thread.is_alive()
        assert seen == [False, True, False]  # doubted after the denial, not after an answer


def test_a_commit_that_loses_its_standing_while_storing_stops_there() -> None:
    """``allowed`` is asked once the commit holds its locks and before each further
    cursor: a member whose coordinator fell silent meanwhile stores no more."""
    member = _Member()
    readers = [PartitionReader("orders", p, epoch=1) for p in range(3)]
    for reader in readers:
        member.reading(reader)
    with member.lock:
        member.commits.delivered([(r, _message(5)) for r in readers])
    member.commits.mark_processed(member.readers)
    answers = iter([True, False])
    stored = member.commits.commit([("orders", p) for p in range(3)], allowed=lambda: next(answers))
    assert stored == {("orders", 0): 5}
    assert member.core.cursors == [("orders", 0, 5)]
    # Refused outright: nothing is stored, and the positions are kept for later.
    assert member.commits.commit([("orders", 1)], allowed=lambda: False) == {}
    assert member.commits.commit([("orders", 1), ("orders", 2)]) == {
        ("orders", 1): 5,
        ("orders", 2): 5,
    }


class _SlowToClose:
    """A reader's subscription whose ``close()`` says it began (``closing``) and returns
    only once let go (``go``): a reader stuck in a call it cannot leave."""

    def __init__(self) -> None:
        self.closing, self.go = threading.Event(), threading.Event()

    def close(self) -> None:
        self.closing.set()
        self.go.wait(10)


def test_the_queued_messages_of_every_revoked_partition_stop_going_out_at_once() -> None:
    """Two partitions are taken away by one assignment. Stopping the first one's reader
    takes a while (its thread is inside a call that cannot be interrupted): meanwhile
    the iterator must not hand out what the second one queued. Those messages are its
    new owner's now, which reads them again from the cursor: handed out here too, they
    would be processed twice."""
    member = _Member()
    first = PartitionReader("orders", 0, epoch=1)
    second = PartitionReader("orders", 1, epoch=1)
    slow = _SlowToClose()
    first.sub = cast(Any, slow)
    member.reading(first)
    member.reading(second)
    mailbox = member.readers._mailbox
    assert mailbox.put(second, make_message(5, partition=1, stream="orders", subject="orders"))
    revoking = threading.Thread(target=member.readers.reconcile, args=([], 2))
    revoking.start()
    try:
        assert slow.closing.wait(10)  # stopping the first reader
        assert second.released
        with pytest.raises(TimeoutError):
            mailbox.peek(1, 0)
    finally:
        slow.go.set()
        revoking.join(10)
    assert not revoking.is_alive()
    assert first.stopped and second.stopped


def test_close_hands_out_no_more_messages_while_it_stops_the_readers() -> None:
    """``close()`` from another thread stops the readers one by one (one inside a call
    that cannot be interrupted takes up to the RPC timeout). Meanwhile the iterator
    must not hand out what the others queued: their partitions are no longer read, the
    messages would never count as processed, and the next owner delivers them again."""
    from liftbridge_sync import Client
    from liftbridge_sync.consumer import Consumer

    with Client("127.0.0.1:1") as client:  # never connects
        consumer = Consumer(client._core, "g", ["orders"], auto_commit=None)
        consumer._membership.leave = lambda: None  # type: ignore[method-assign]
        first = PartitionReader("orders", 0, epoch=1)
        second = PartitionReader("orders", 1, epoch=1)
        slow = _SlowToClose()
        first.sub = cast(Any, slow)
        with consumer._lock:
            consumer._readers._readers[("orders", 0)] = first
            consumer._readers._readers[("orders", 1)] = second
        queued = make_message(5, partition=1, stream="orders", subject="orders")
        assert consumer._mailbox.put(second, queued)
        closer = threading.Thread(target=consumer.close)
        closer.start()
        try:
            assert slow.closing.wait(10)  # stopping the first reader
            with pytest.raises(StopIteration):  # the queued message is not handed out
                consumer.get(0)
        finally:
            slow.go.set()
            closer.join(10)
        assert not closer.is_alive()
        assert first.stopped and second.stopped
        with pytest.raises(StopIteration):
            consumer.get(0)


def test_an_unexpected_auto_commit_failure_is_logged_and_the_next_interval_tries_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only LiftbridgeError was caught: any other exception ended the commit thread, and
    every later auto-commit, without a word."""
    from liftbridge_sync import Client
    from liftbridge_sync.consumer import Consumer

    with Client("127.0.0.1:1") as client:  # never connects
        consumer = Consumer(client._core, "g", ["orders"], auto_commit=5.0, rejoin=False)
        calls: list[int] = []

        def broken(*args: object, **kwargs: object) -> dict[tuple[str, int], int]:
            calls.append(1)
            raise RuntimeError("a bug")

        working = consumer._commits.commit
        consumer._commits.commit = broken  # type: ignore[method-assign]
        with caplog.at_level("ERROR", logger="liftbridge_sync.consumer"):
            consumer._autocommit.commit_once()  # raised RuntimeError (ending the thread)
            consumer._autocommit.commit_once()
        assert len(calls) == 2
        assert [r.exc_info is not None for r in caplog.records] == [True, True]
        consumer._commits.commit = working  # type: ignore[method-assign]
        consumer.close()


def test_a_revoked_position_is_committed_off_the_heartbeat_within_its_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The heartbeat only hands the positions of partitions taken away over; the commit
    thread stores them, unless the partition came back meanwhile (its new reader starts
    from the cursor) or the deadline passed (the new owner has long started)."""
    member = _Member(commit_on_revoke=True)
    readers = [PartitionReader("orders", p, epoch=1) for p in range(3)]
    for reader in readers:
        member.reading(reader)
    with member.lock:
        member.commits.delivered([(r, _message(7)) for r in readers])
    member.commits.mark_processed(member.readers)
    assert member.readers.reconcile([_assignment(2)], epoch=2)  # 0 and 1 taken away
    assert member.core.cursors == []  # not on the heartbeat thread
    assert member.commits.handed_off.is_set()
    assert member.commits.hand_off(lambda: True) == {("orders", 0): 7, ("orders", 1): 7}
    assert not member.commits.hand_off(lambda: True)  # once
    # Taken away and given back before the commit thread ran: nothing to store.
    member.commits.release([("orders", 2)], [("orders", 2)], within=10)
    with member.lock:
        member.commits.reclaim(("orders", 2))
    assert member.commits.hand_off(lambda: True) == {}
    # Too late: dropped with a WARNING.
    with member.lock:
        member.commits._done[("orders", 2)] = 9
    member.commits.release([("orders", 2)], [("orders", 2)], within=0)
    with caplog.at_level("WARNING", logger="liftbridge_sync.consumer"):
        assert member.commits.hand_off(lambda: True) == {}
    assert "not committed in time" in caplog.text
    assert member.core.cursors == [("orders", 0, 7), ("orders", 1, 7)]


class _EndingThread:
    """A failed reader's thread that is ending: ``join()`` says it began (``joining``)
    and returns once let go (``go``)."""

    def __init__(self) -> None:
        self.joining, self.go = threading.Event(), threading.Event()

    def join(self, timeout: float | None = None) -> None:
        self.joining.set()
        self.go.wait(10)


def test_a_delivery_of_a_failed_reader_counts_while_the_reader_is_being_restarted() -> None:
    """The heartbeat restarts a failed reader of a partition still assigned: it waits
    for the old thread to end, then puts the new reader in place. A read meanwhile marks
    the old reader's delivery processed: it must count (the partition never stopped
    being this member's), not be dropped as if the partition had been taken away."""
    member = _Member()
    member.readers._read = lambda reader: None  # type: ignore[method-assign,assignment]
    failed = PartitionReader(*KEY, epoch=1, failed=True)
    ending = _EndingThread()
    failed.thread = cast(Any, ending)
    member.reading(failed)
    member.deliver(failed, 10)
    restarting = threading.Thread(target=member.readers.reconcile, args=([_assignment(0)], 1))
    restarting.start()
    try:
        assert ending.joining.wait(10)  # between the old reader and the new one
        member.commits.mark_processed(member.readers)  # the next read
    finally:
        ending.go.set()
        restarting.join(10)
    assert not restarting.is_alive()
    with member.lock:
        assert member.readers._readers[KEY] is not failed
    assert member.commits.commit([KEY]) == {KEY: 10}


class _FailingCore:
    """A cursor store whose ``__cursors`` leaders fail for some partitions: ``refused``
    by :meth:`set_cursor` (the retry policy's attempts), ``once_refused`` by
    :meth:`set_cursor_once`; ``clock`` moves on by each attempt's cost."""

    def __init__(self, refused: set[int], once_refused: set[int], cost: float = 0.0) -> None:
        self.refused, self.once_refused, self.cost = refused, once_refused, cost
        self.calls: list[tuple[str, int, float | None]] = []
        self.clock = [0.0]
        retry = types.SimpleNamespace(max_delay=10.0)
        self.options = types.SimpleNamespace(rpc_timeout=4.0, retry=retry)

    def set_cursor(self, cursor_id: str, stream: str, partition: int, offset: int) -> None:
        self.calls.append(("policy", partition, None))
        self.clock[0] += self.cost
        if partition in self.refused:
            raise BrokerUnavailableError("connection refused", code="UNAVAILABLE")

    def set_cursor_once(
        self, cursor_id: str, stream: str, partition: int, offset: int, timeout: float
    ) -> None:
        self.calls.append(("once", partition, timeout))
        self.clock[0] += self.cost
        if partition in self.once_refused:
            raise DeadlineExceededError("no answer", code="DEADLINE_EXCEEDED")


def _commit_processed(core: _FailingCore, partitions: range) -> Commits:
    commits = Commits(cast(Any, core), "__group:g", threading.Lock())
    for p in partitions:
        commits._done[("orders", p)] = 5
    return commits


def test_a_cursor_that_fails_does_not_hold_back_the_cursors_after_it() -> None:
    core = _FailingCore(refused={0}, once_refused={2})
    commits = _commit_processed(core, range(4))
    with pytest.raises(CommitError) as caught:
        commits.commit([("orders", p) for p in range(4)])
    assert sorted(caught.value.failed) == [("orders", 0), ("orders", 2)]
    assert isinstance(caught.value.failed[("orders", 0)], BrokerUnavailableError)
    assert caught.value.committed == {("orders", 1): 5, ("orders", 3): 5}
    assert commits.committed() == caught.value.committed
    # After the first failure, one attempt each, of at most rpc_timeout.
    assert core.calls == [("policy", 0, None), ("once", 1, 4.0), ("once", 2, 4.0), ("once", 3, 4.0)]
    # The next commit tries the failed ones again, the whole policy first.
    core.refused = set()
    assert commits.commit([("orders", p) for p in range(4)]) == {("orders", 0): 5, ("orders", 2): 5}


def test_after_a_failure_the_cursors_are_tried_within_one_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every leader hangs: each attempt takes its whole rpc_timeout (4 s here). A commit
    # of many partitions must not last one timeout per partition: after the first
    # failure it has max(max_delay, rpc_timeout) = 10 s, and the rest are not tried.
    core = _FailingCore(refused={0}, once_refused=set(range(1, 8)), cost=4.0)
    # The module's clock only (time.monotonic itself is every thread's).
    clock = types.SimpleNamespace(monotonic=lambda: core.clock[0])
    monkeypatch.setattr(_commits, "time", clock)
    commits = _commit_processed(core, range(8))
    with pytest.raises(CommitError) as caught:
        commits.commit([("orders", p) for p in range(8)])
    assert len(caught.value.failed) == 8 and not caught.value.committed
    assert core.calls == [("policy", 0, None), ("once", 1, 4.0), ("once", 2, 4.0), ("once", 3, 2.0)]
    assert "not tried" in str(caught.value.failed[("orders", 7)])


def test_a_commit_on_revoke_tries_the_cursors_within_one_budget_after_a_failure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Every leader hangs (4 s an attempt): the positions of partitions taken away used
    # to get the whole retry policy each, keeping the commit thread from the interval's
    # commit for one policy per partition. As commit(): the first failure takes the
    # policy, then one attempt each within max(max_delay, rpc_timeout) = 10 s.
    core = _FailingCore(refused={0}, once_refused=set(range(1, 8)), cost=4.0)
    clock = types.SimpleNamespace(monotonic=lambda: core.clock[0])
    monkeypatch.setattr(_commits, "time", clock)
    commits = _commit_processed(core, range(8))
    commits.release([("orders", p) for p in range(8)], [], within=100.0)
    with caplog.at_level("WARNING", logger="liftbridge_sync.consumer"):
        assert commits.hand_off(lambda: True) == {}
    assert core.calls == [("policy", 0, None), ("once", 1, 4.0), ("once", 2, 4.0), ("once", 3, 2.0)]
    assert "not tried now" in caplog.text
    # The rest are kept for the next call, within their deadline: the policy first again.
    core.calls.clear()
    core.refused, core.once_refused = set(), set()
    assert commits.hand_off(lambda: True) == {("orders", p): 5 for p in range(4, 8)}
    assert core.calls == [("policy", p, None) for p in range(4, 8)]


def test_what_an_interrupted_read_left_is_handed_out_unless_its_partition_was_taken_away() -> None:
    """A read interrupted after taking messages off the mailbox leaves them for the
    next read (see ``Consumer.get_many``); one of a partition taken away since is
    dropped, as the mailbox drops a stopped reader's messages."""
    from liftbridge_sync import Client, RetryPolicy
    from liftbridge_sync.consumer import Consumer

    # Never connects; the close's leave is refused at once.
    with Client("127.0.0.1:1", retry=RetryPolicy.no_retry()) as client:
        consumer = Consumer(client._core, "g", ["orders"], auto_commit=None)
        kept, taken_away = (PartitionReader("orders", p, epoch=1) for p in range(2))
        left = [
            (kept, make_message(3, partition=0, stream="orders", subject="orders")),
            (taken_away, make_message(7, partition=1, stream="orders", subject="orders")),
        ]
        newer = make_message(4, partition=0, stream="orders", subject="orders")
        for reader, msg in left:
            assert consumer._mailbox.put(reader, msg)
        assert consumer._mailbox.put(kept, newer)
        consumer._hand = list(left)  # taken, then interrupted before the drop
        taken_away.stopped = True
        assert [m.offset for m in consumer.get_many(10, 0)] == [3]
        assert [m.offset for m in consumer.get_many(10, 0)] == [4]  # the drop was done
        consumer.close()
