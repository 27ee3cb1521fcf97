"""The activity stream against the real server (started with activity.stream.enabled)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from liftbridge_sync import (
    ActivityEvent,
    ActivityStream,
    ArgumentTypeError,
    Client,
    ConfigurationError,
    ConsumerJoinedGroup,
    ConsumerLeftGroup,
    LiftbridgeError,
    StartAt,
    StreamCreated,
    StreamDeleted,
    StreamPaused,
    StreamReadonlySet,
    StreamResumed,
)
from liftbridge_sync.activity import ACTIVITY_STREAM
from tests.stacks import thread_in
from tests.waiting import wait_until

from ._pubdata import publish as publish_raw
from .conftest import unique

pytestmark = pytest.mark.integration


def take_matching(
    events: ActivityStream,
    n: int,
    match: Callable[[ActivityEvent], bool],
    timeout: float = 15.0,
) -> list[ActivityEvent]:
    """The next ``n`` events that ``match`` (others, from other tests, are skipped)."""
    deadline = time.monotonic() + timeout
    found: list[ActivityEvent] = []
    while len(found) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"only {len(found)} of {n} events within {timeout}s: {found}")
        try:
            event = events.get(remaining)
        except TimeoutError:
            continue
        if match(event):
            found.append(event)
    return found


def about(name: str) -> Callable[[ActivityEvent], bool]:
    return lambda event: getattr(event, "stream", None) == name


def test_stream_events_arrive_in_order_with_their_fields(liftbridge_client: Client) -> None:
    name = unique("act")
    with liftbridge_client.activity() as events:
        liftbridge_client.create_stream(name, name, partitions=3)
        liftbridge_client.pause_stream(name, partitions=[1, 2], resume_all=True)
        # A publish to a paused partition resumes it (all of them: resume_all).
        liftbridge_client.publish(name, b"wake", partition=1)
        liftbridge_client.set_stream_readonly(name, partitions=[0])
        liftbridge_client.set_stream_readonly(name, partitions=[0], readonly=False)
        liftbridge_client.delete_stream(name)
        got = take_matching(events, 6, about(name))

    created, paused, resumed, readonly, writable, deleted = got
    assert isinstance(created, StreamCreated)
    assert created.partitions == (0, 1, 2)
    assert isinstance(paused, StreamPaused)
    assert sorted(paused.partitions) == [1, 2] and paused.resume_all is True
    assert isinstance(resumed, StreamResumed)
    assert sorted(resumed.partitions) == [1, 2]
    assert isinstance(readonly, StreamReadonlySet)
    assert readonly.partitions == (0,) and readonly.readonly is True
    assert isinstance(writable, StreamReadonlySet)
    assert writable.readonly is False
    assert isinstance(deleted, StreamDeleted)
    # Ids are Raft indexes and offsets positions in __activity: both strictly increase.
    ids = [e.id for e in got]
    assert ids == sorted(set(ids))
    offsets = [e.offset for e in got]
    assert offsets == sorted(set(offsets))
    assert all(e.timestamp is not None for e in got)


def test_consumer_group_join_and_leave_are_announced(liftbridge_client: Client) -> None:
    name = unique("actg")
    group = unique("group")
    liftbridge_client.create_stream(name, name)
    try:
        with liftbridge_client.activity() as events:
            c1 = liftbridge_client.consumer(
                group, streams=[name], auto_commit=None, consumer_id="c1"
            )
            c2 = liftbridge_client.consumer(
                group, streams=[name], auto_commit=None, consumer_id="c2"
            )
            c1.close()
            c2.close()
            got = take_matching(events, 4, lambda e: getattr(e, "group_id", None) == group)
    finally:
        liftbridge_client.delete_stream(name)
    joined1, joined2, left1, left2 = got
    # The first join creates the group; the server announces it as a join too.
    assert isinstance(joined1, ConsumerJoinedGroup)
    assert (joined1.consumer_id, joined1.streams) == ("c1", (name,))
    assert isinstance(joined2, ConsumerJoinedGroup) and joined2.consumer_id == "c2"
    assert isinstance(left1, ConsumerLeftGroup)
    assert (left1.consumer_id, left1.expired) == ("c1", False)
    assert isinstance(left2, ConsumerLeftGroup) and left2.consumer_id == "c2"


def test_start_earliest_replays_past_events(liftbridge_client: Client) -> None:
    name = unique("actp")
    liftbridge_client.create_stream(name, name)
    liftbridge_client.delete_stream(name)
    with liftbridge_client.activity(start=StartAt.earliest()) as events:
        created, deleted = take_matching(events, 2, about(name))
    assert isinstance(created, StreamCreated) and isinstance(deleted, StreamDeleted)
    assert created.id < deleted.id


def test_activity_needs_an_activity_stream_enabled_server() -> None:
    from liftbridge_sync import ActivityStreamDisabledError, ClientClosedError, NoSuchStreamError
    from liftbridge_sync.testing import LiftbridgeServer

    with LiftbridgeServer(activity=False) as server, Client(server.address) as client:
        started = time.monotonic()
        with pytest.raises(ActivityStreamDisabledError, match="activity.stream.enabled: true"):
            client.activity(timeout=0.5)
        assert time.monotonic() - started < 5.0
        with pytest.raises(NoSuchStreamError, match="__activity"):  # what it is, too
            client.activity(timeout=0)
        # A close() from another thread ends the wait.
        failed: list[BaseException] = []

        def wait_long() -> None:
            try:
                client.activity(timeout=600)
            except BaseException as exc:
                failed.append(exc)

        waiter = threading.Thread(target=wait_long, name="waiter", daemon=True)
        waiter.start()
        wait_until(lambda: thread_in(waiter, "back_off"), timeout=10, what="the wait")
        client.close()
        waiter.join(10)
        assert not waiter.is_alive()
        assert len(failed) == 1 and isinstance(failed[0], ClientClosedError), failed


def test_resuming_after_an_event_id_drops_repeats_of_earlier_events() -> None:
    """An application resuming after the last event it handled (its id and offset
    saved) must not see again a repeat, published after that event, of one before it:
    a new ActivityStream remembers no ids."""
    from liftbridge_sync._proto import api_pb2
    from liftbridge_sync.testing import LiftbridgeServer

    with LiftbridgeServer() as server, Client(server.address) as client:
        with pytest.raises(ArgumentTypeError):
            client.activity(after_id="1")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="after_id"):
            client.activity(after_id=-1)
        client.create_stream("r1", "r1")
        client.create_stream("r2", "r2")
        with client.activity(start=StartAt.earliest()) as events:
            first, handled = take_matching(events, 2, lambda e: about("r1")(e) or about("r2")(e))
        # What the server publishes again after a metadata-leader change: the same id.
        repeat = api_pb2.ActivityStreamEvent(
            id=first.id,
            op=api_pb2.CREATE_STREAM,
            createStreamOp=api_pb2.CreateStreamOp(stream="r1", partitions=[0]),
        )
        publish_raw(server.address, "__activity", [repeat.SerializeToString()])
        client.create_stream("r3", "r3")
        wanted = lambda e: about("r1")(e) or about("r3")(e)  # noqa: E731
        # By offset alone the repeat comes again: a new stream remembers no ids.
        with client.activity(start=StartAt.offset(handled.offset + 1)) as events:
            (again,) = take_matching(events, 1, wanted)
        assert isinstance(again, StreamCreated) and again.id == first.id
        resumed = client.activity(start=StartAt.offset(handled.offset + 1), after_id=handled.id)
        with resumed as events:
            (after_offset,) = take_matching(events, 1, wanted)
        # Without a start, it reads from the earliest event, dropping those up to the id.
        with client.activity(after_id=handled.id) as events:
            (after_earliest,) = take_matching(events, 1, wanted)
    assert isinstance(after_offset, StreamCreated) and after_offset.stream == "r3"
    assert after_earliest == after_offset


def test_the_activity_stream_resubscribes_across_a_server_restart() -> None:
    from liftbridge_sync.testing import LiftbridgeServer

    with LiftbridgeServer() as server, Client(server.address) as client:
        with client.activity() as events:
            client.create_stream("before", "before")
            (before,) = take_matching(events, 1, about("before"))
            server.restart()
            client.create_stream("after", "after")
            (after,) = take_matching(events, 1, about("after"), timeout=40)
        assert isinstance(before, StreamCreated) and isinstance(after, StreamCreated)
        assert after.id > before.id and after.offset > before.offset


def test_a_forged_event_id_does_not_silence_the_stream() -> None:
    """Any client may publish to ``__activity`` (the server refuses only to create or
    delete it; this client refuses to publish there): an event forged with the largest id
    must not make every later one a "repeat"."""
    from liftbridge_sync._proto import api_pb2
    from liftbridge_sync.testing import LiftbridgeServer

    forged = api_pb2.ActivityStreamEvent(
        id=2**64 - 1,
        op=api_pb2.DELETE_STREAM,
        deleteStreamOp=api_pb2.DeleteStreamOp(stream="forged"),
    )
    with LiftbridgeServer() as server, Client(server.address) as client:
        with client.activity() as events:
            client.create_stream("first", "first")
            (first,) = take_matching(events, 1, about("first"))
            publish_raw(server.address, "__activity", [forged.SerializeToString()])
            (fake,) = take_matching(events, 1, about("forged"))
            client.create_stream("second", "second")
            (second,) = take_matching(events, 1, about("second"))
            # A repeat (same id) of an event delivered is still dropped.
            repeat = api_pb2.ActivityStreamEvent(
                id=first.id,
                op=api_pb2.CREATE_STREAM,
                createStreamOp=api_pb2.CreateStreamOp(stream="first", partitions=[0]),
            )
            publish_raw(server.address, "__activity", [repeat.SerializeToString()])
            client.create_stream("third", "third")
            (after,) = take_matching(events, 1, lambda e: about("first")(e) or about("third")(e))
    assert isinstance(fake, StreamDeleted) and fake.id == 2**64 - 1
    assert isinstance(second, StreamCreated) and second.id > first.id
    assert isinstance(after, StreamCreated) and after.stream == "third"


def test_a_message_that_is_no_event_is_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Junk published to ``__activity`` (by another client) must not end a ``for`` loop, nor
    flood the log: the first is told, those after it within a minute are not."""
    from liftbridge_sync.testing import LiftbridgeServer

    with LiftbridgeServer() as server, Client(server.address) as client:
        with client.activity() as events:
            publish_raw(server.address, "__activity", [b""])
            publish_raw(server.address, "__activity", [b"\xff\xff\xff"])
            client.create_stream("after-junk", "after-junk")
            with caplog.at_level("WARNING", logger="liftbridge_sync.subscription"):
                (created,) = take_matching(events, 1, about("after-junk"))
    assert isinstance(created, StreamCreated)
    skipped = [r.getMessage() for r in caplog.records if "not an activity event" in r.getMessage()]
    assert len(skipped) == 1, skipped
    assert f"offset {created.offset - 2} " in skipped[0]


def test_activity_on_a_new_cluster_waits_for_its_activity_stream(tmp_path: Path) -> None:
    """A new cluster creates ``__activity`` once it elects its first metadata leader,
    a while after its servers answer: ``activity()`` raised ``NoSuchStreamError`` if
    called in between (an application started with its cluster)."""
    from liftbridge_sync.testing import NatsServer, install_server
    from liftbridge_sync.testing._cluster.nodes import build_nodes

    nats = NatsServer(tmp_path).start()
    nodes = build_nodes(
        install_server(),
        tmp_path,
        nats.url,
        size=2,
        namespace=unique("lbact"),
        tls=None,
        cursors_partitions=0,
        activity=True,
        log_level="info",
        extra_config={},
        env={},
        startup_timeout=30.0,
    )
    try:
        first, second = nodes
        # Alone, one of two bootstrap peers has no quorum: no leader, no __activity.
        first.spawn()
        with Client(first.address) as client:
            wait_until(lambda: _answers(client), timeout=30, what="the first node serving")
            assert ACTIVITY_STREAM not in client.fetch_metadata().streams
            opened: list[ActivityStream | BaseException] = []

            def open_it() -> None:
                try:
                    # Not the 10 s default: a loaded machine may take longer to elect.
                    opened.append(client.activity(timeout=60))
                except BaseException as exc:  # handed to the test's thread
                    opened.append(exc)

            opener = threading.Thread(target=open_it, name="opener", daemon=True)
            opener.start()
            second.spawn()  # the two elect a leader, which creates __activity
            opener.join(70)
            assert not opener.is_alive()
            (result,) = opened
            if isinstance(result, BaseException):
                raise result
            with result as events:
                client.create_stream("born", "born")
                (created,) = take_matching(events, 1, about("born"))
        assert isinstance(created, StreamCreated)
    finally:
        for node in nodes:
            node.kill()
        nats.kill()


def _answers(client: Client) -> bool:
    try:
        client.fetch_metadata()
    except LiftbridgeError:
        return False
    return True
