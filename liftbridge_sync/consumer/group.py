"""A consumer-group member: join, heartbeat, follow assignments, commit cursors, leave.

The protocol (server ``groups.go``, go-liftbridge ``consumer.go``):

* ``JoinConsumerGroup`` (any broker) returns the group's coordinator, its epoch and the
  server's consumer and coordinator timeouts.
* A ``liftbridge-consumer-<group>`` thread polls ``FetchConsumerGroupAssignments`` on
  the coordinator every 0.4 × the consumer timeout (as the Go client does); the poll is
  the heartbeat. A coordinator that refuses (not the coordinator, stale epoch) makes it
  read the group's metadata again for the current coordinator and epoch; a coordinator
  that cannot be reached for the coordinator timeout is reported with
  ``ReportConsumerGroupCoordinator``, after which the metadata leader picks another.
* Each assigned partition is read by a ``liftbridge-consumer-<stream>-<partition>``
  thread with an ordinary resubscribing subscription carrying the group's ``Consumer``
  field; partitions taken away are stopped and their buffered messages dropped.
* Positions are cursors with go-liftbridge's id ``__group:<group>`` holding the last
  processed offset; a newly assigned partition starts at cursor + 1, or at the
  configured start position when it has no cursor.
* ``LeaveConsumerGroup`` on close.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import CallContext
from liftbridge_sync._wire.validate import check_name, check_timeout
from liftbridge_sync.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    ConfigurationError,
    ConsumerGroupNotFoundError,
    CoordinatorMismatchError,
    LiftbridgeError,
    NotGroupMemberError,
)
from liftbridge_sync.models import Message
from liftbridge_sync.positions import StartAt, StartKind
from liftbridge_sync.subscription.opening import build_subscribe_request
from liftbridge_sync.subscription.partition import Subscription, SubscriptionTarget

__all__ = ["CONSUMER_BUFFER", "Consumer", "group_cursor_id"]

_log = logging.getLogger("liftbridge_sync.consumer")

#: Messages buffered between the partition readers and the iterating thread.
CONSUMER_BUFFER = 1024
#: go-liftbridge's heartbeat: this fraction of the server's consumer timeout.
_HEARTBEAT_FRACTION = 0.4
#: Wait before polling again after a failed poll (the Go client waits 2 s).
_RETRY_WAIT = 0.5
_START_KINDS = (StartKind.EARLIEST, StartKind.LATEST, StartKind.NEW_ONLY)

_Key = tuple[str, int]


def group_cursor_id(group: str) -> str:
    """The cursor id under which a group's positions are stored (go-liftbridge's)."""
    return f"__group:{group}"


@dataclasses.dataclass(eq=False)
class _Reader:
    """One assigned partition being read. Mutable; guarded by the consumer's lock."""

    stream: str
    partition: int
    epoch: int
    thread: threading.Thread | None = None
    sub: Subscription | None = None
    stopped: bool = False
    failed: bool = False


class _Mailbox:
    """Bounded FIFO of (reader, message) between reader threads and the iterator.

    Thread-safe.
    """

    def __init__(self, capacity: int) -> None:
        self._cond = threading.Condition()
        self._items: collections.deque[tuple[_Reader, Message]] = collections.deque()
        self._capacity = capacity
        self._closed = False
        self._error: BaseException | None = None

    def put(self, reader: _Reader, msg: Message) -> bool:
        """Queue ``msg``; ``False`` once the reader was stopped or the mailbox closed."""
        with self._cond:
            while len(self._items) >= self._capacity and not (self._closed or reader.stopped):
                self._cond.wait(0.5)
            if self._closed or reader.stopped:
                return False
            self._items.append((reader, msg))
            self._cond.notify_all()
            return True

    def fail(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def get(self, timeout: float | None) -> Message:
        """The next message of a partition still assigned."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                while self._items:
                    reader, msg = self._items.popleft()
                    self._cond.notify_all()
                    if not reader.stopped:
                        return msg
                if self._error is not None:
                    raise self._error
                if self._closed:
                    raise StopIteration
                if deadline is None:
                    self._cond.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no message arrived within the timeout")
                self._cond.wait(remaining)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()


class Consumer:
    """A member of a consumer group: one iterator over the partitions assigned to it.

    Made by :meth:`Client.consumer`::

        with client.consumer("billing", streams=["orders"], auto_commit=5.0) as consumer:
            for msg in consumer:
                handle(msg)

    The server spreads the partitions of the group's streams over its members; when a
    member joins or leaves, partitions move. Delivery is **at-least-once**: a message is
    *processed* once the iterator is asked for the next message (or :meth:`commit` is
    called); committed positions are what a partition's next owner resumes after.
    With ``auto_commit=<seconds>`` processed positions are committed at that interval,
    when a partition is taken away and on close; with ``auto_commit=None`` only
    :meth:`commit` commits. Cursors use go-liftbridge's id ``__group:<group>``, so Go and
    Python members of one group continue each other's work.

    Fatal conditions are raised by the iterator: :class:`ConsumerGroupNotFoundError` or
    :class:`NotGroupMemberError` when the server dropped this member (it stopped
    polling for longer than the server's consumer timeout).

    Thread-safe: iterate from one thread; :meth:`commit` and :meth:`close` may be called
    from any thread.
    """

    close_accepts_timeout = False

    def __init__(
        self,
        core: ClientCore,
        group: str,
        streams: Sequence[str],
        *,
        consumer_id: str | None = None,
        start: StartAt | None = None,
        auto_commit: float | None,
        buffer: int = CONSUMER_BUFFER,
    ) -> None:
        if not isinstance(group, str) or not group:
            raise ConfigurationError("'group' must be a non-empty str")
        if isinstance(streams, str) or not streams:
            raise ConfigurationError("'streams' must be a non-empty sequence of stream names")
        self._streams = tuple(check_name("streams", s) for s in streams)
        if consumer_id is not None and (not isinstance(consumer_id, str) or not consumer_id):
            raise ConfigurationError("'consumer_id' must be a non-empty str or None")
        start = StartAt.new_only() if start is None else start
        if not isinstance(start, StartAt) or start.kind not in _START_KINDS:
            raise ConfigurationError(
                "'start' must be StartAt.earliest(), StartAt.latest() or StartAt.new_only(): "
                "where partitions without a committed cursor begin"
            )
        interval = check_timeout("auto_commit", auto_commit, allow_zero=False)
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            raise ConfigurationError("'buffer' must be an int >= 1")
        self._core = core
        self._group = group
        self._consumer_id = consumer_id or uuid.uuid4().hex
        self._start = start
        self._auto_commit = interval
        self._cursor_id = group_cursor_id(group)
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._mailbox = _Mailbox(buffer)
        self._readers: dict[_Key, _Reader] = {}
        self._done: dict[_Key, int] = {}
        self._committed: dict[_Key, int] = {}
        self._pending: tuple[_Key, int] | None = None
        self._coordinator = ""
        self._epoch = 0
        self._interval = 1.0
        self._consumer_timeout = 15.0
        self._coordinator_timeout = 15.0
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle

    def join(self) -> None:
        """Join the group and start the heartbeat (and auto-commit) threads.

        Raises:
            NoSuchStreamError: if a stream does not exist.
            ServerError: if the server refused the join (e.g. the id is already a member).
        """
        request = api_pb2.JoinConsumerGroupRequest(
            groupId=self._group, consumerId=self._consumer_id, streams=list(self._streams)
        )
        response = self._core.call_any(rpcs.JOIN_CONSUMER_GROUP, request, context=CallContext.GROUP)
        with self._lock:
            self._coordinator = response.coordinator
            self._epoch = int(response.epoch)
            consumer_timeout = max(0.1, response.consumerTimeout / 1e9)
            self._consumer_timeout = consumer_timeout
            self._interval = _HEARTBEAT_FRACTION * consumer_timeout
            self._coordinator_timeout = max(0.1, response.coordinatorTimeout / 1e9)
        self._start_thread(f"liftbridge-consumer-{self._group}", self._heartbeat_loop)
        if self._auto_commit is not None:
            self._start_thread(f"liftbridge-consumer-commit-{self._group}", self._commit_loop)

    def _start_thread(self, name: str, target: object) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()
        return thread

    @property
    def group(self) -> str:
        """The group id."""
        return self._group

    @property
    def consumer_id(self) -> str:
        """This member's id (generated unless given)."""
        return self._consumer_id

    @property
    def cursor_id(self) -> str:
        """The cursor id positions are committed under: ``__group:<group>``."""
        return self._cursor_id

    @property
    def epoch(self) -> int:
        """The group epoch of the current assignment."""
        return self._epoch

    @property
    def coordinator(self) -> str:
        """Broker id of the group's coordinator, as last known."""
        return self._coordinator

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def assignment(self) -> frozenset[tuple[str, int]]:
        """The (stream, partition) pairs currently assigned to and read by this member."""
        with self._lock:
            return frozenset(k for k, r in self._readers.items() if not (r.stopped or r.failed))

    def close(self) -> None:
        """Stop reading, commit (with auto-commit), leave the group, join threads.

        Idempotent. A blocked iteration ends with ``StopIteration``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            readers = list(self._readers.values())
            self._readers.clear()
        self._stop.set()
        for reader in readers:
            self._stop_reader(reader)
        current = threading.current_thread()
        timeout = self._core.options.rpc_timeout * 2 + 1.0
        for reader in readers:
            if reader.thread is not None and reader.thread is not current:
                reader.thread.join(timeout)
        for thread in self._threads:
            if thread is not current:
                thread.join(timeout)
        if self._auto_commit is not None:
            try:
                self._commit_done((r.stream, r.partition) for r in readers)
            except LiftbridgeError as exc:
                _log.warning("consumer %s: final commit failed: %s", self._group, exc)
        self._mailbox.close()
        try:
            self._core.call_any(
                rpcs.LEAVE_CONSUMER_GROUP,
                api_pb2.LeaveConsumerGroupRequest(
                    groupId=self._group, consumerId=self._consumer_id
                ),
                context=CallContext.GROUP,
            )
        except (ConsumerGroupNotFoundError, NotGroupMemberError, ClientClosedError):
            pass  # already out of the group
        except LiftbridgeError as exc:
            _log.warning("consumer %s: leaving the group failed: %s", self._group, exc)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is None:
            self._mark_pending_done()
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"epoch={self._epoch}"
        return f"<Consumer {self._group}/{self._consumer_id} {state}>"

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        return self.get(None)

    def get(self, timeout: float | None = None) -> Message:
        """The next message of an assigned partition; the previous one counts as processed.

        Raises:
            TimeoutError: if none arrived within ``timeout`` seconds.
            StopIteration: once closed.
            ConsumerGroupNotFoundError, NotGroupMemberError: the server dropped this
                member.
        """
        seconds = check_timeout("timeout", timeout)
        self._mark_pending_done()
        msg = self._mailbox.get(seconds)
        with self._lock:
            self._pending = ((msg.stream, msg.partition), msg.offset)
        return msg

    def _mark_pending_done(self) -> None:
        with self._lock:
            if self._pending is not None:
                key, offset = self._pending
                self._pending = None
                if offset > self._done.get(key, -1):
                    self._done[key] = offset

    # ------------------------------------------------------------------ commits

    def commit(self) -> dict[tuple[str, int], int]:
        """Commit the positions of every message delivered so far, the last one included.

        Only partitions still assigned to this member are committed: a partition that
        moved away may already have progressed under its new owner.

        Returns:
            The offsets stored by this call, per (stream, partition).

        Raises:
            LiftbridgeError: if a cursor could not be stored (the others may have been).
        """
        self._mark_pending_done()
        return self._commit_done()

    def committed(self) -> dict[tuple[str, int], int]:
        """The offsets this member committed, per (stream, partition)."""
        with self._lock:
            return dict(self._committed)

    def _commit_done(self, keys: Iterable[_Key] | None = None) -> dict[_Key, int]:
        """Commit processed positions of ``keys`` (default: the partitions assigned now)."""
        with self._commit_lock:
            with self._lock:
                wanted = set(self._readers) if keys is None else set(keys)
                todo = {
                    k: self._done[k]
                    for k in wanted
                    if k in self._done and self._done[k] > self._committed.get(k, -1)
                }
            for (stream, partition), offset in sorted(todo.items()):
                self._core.set_cursor(self._cursor_id, stream, partition, offset)
                with self._lock:
                    self._committed[(stream, partition)] = offset
            return todo

    def _commit_loop(self) -> None:
        interval = self._auto_commit
        assert interval is not None
        while not self._stop.wait(interval):
            try:
                self._commit_done()
            except LiftbridgeError as exc:
                _log.warning("consumer %s: auto-commit failed: %s", self._group, exc)

    # ------------------------------------------------------------------ heartbeat

    def _heartbeat_loop(self) -> None:
        try:
            self._heartbeat()
        except BaseException as exc:  # never die silently: the iterator raises it
            if not self._stop.is_set():
                _log.exception("consumer %s: heartbeat thread failed", self._group)
                self._mailbox.fail(exc)

    def _heartbeat(self) -> None:
        last_contact = time.monotonic()
        #: Since when the cluster says this member (or the group) does not exist.
        unknown_since: float | None = None
        while not self._stop.is_set():
            wait = self._interval
            try:
                try:
                    response = self._fetch_assignments()
                    last_contact = time.monotonic()
                    unknown_since = None
                    self._reconcile(response.assignments, int(response.epoch))
                except CoordinatorMismatchError as exc:
                    _log.info("consumer %s: %s; reading the group's metadata", self._group, exc)
                    wait = 0.0 if self._refresh_group() else _RETRY_WAIT
                except (ConsumerGroupNotFoundError, NotGroupMemberError, ClientClosedError):
                    raise
                except LiftbridgeError as exc:
                    _log.warning(
                        "consumer %s: polling the coordinator failed: %s", self._group, exc
                    )
                    wait = min(_RETRY_WAIT, self._interval)
                    if not self._safe_refresh() and (
                        time.monotonic() - last_contact > self._coordinator_timeout
                    ):
                        self._report_coordinator()
            except (ConsumerGroupNotFoundError, NotGroupMemberError) as exc:
                # In a cluster a broker may not have applied the join yet: only an
                # answer that persists for a consumer timeout means we were dropped.
                now = time.monotonic()
                unknown_since = now if unknown_since is None else unknown_since
                if now - unknown_since >= self._consumer_timeout:
                    if not self._stop.is_set():
                        _log.error("consumer %s: dropped by the server: %s", self._group, exc)
                        self._mailbox.fail(exc)
                    return
                wait = min(_RETRY_WAIT, self._interval)
            except ClientClosedError:
                return
            except LiftbridgeError as exc:
                _log.warning("consumer %s: %s", self._group, exc)
                wait = min(_RETRY_WAIT, self._interval)
            if wait > 0:
                self._stop.wait(wait)

    def _fetch_assignments(self) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
        with self._lock:
            coordinator, epoch = self._coordinator, self._epoch
        broker = self._core.metadata.get().broker(coordinator)
        if broker is None:
            broker = self._core.metadata.refresh().broker(coordinator)
        if broker is None:
            raise BrokerUnavailableError(f"coordinator {coordinator!r} is not in the metadata")
        request = api_pb2.FetchConsumerGroupAssignmentsRequest(
            groupId=self._group, consumerId=self._consumer_id, epoch=epoch
        )
        response: api_pb2.FetchConsumerGroupAssignmentsResponse = self._core.invoke(
            broker.address,
            rpcs.FETCH_CONSUMER_GROUP_ASSIGNMENTS,
            request,
            context=CallContext.GROUP,
        )
        return response

    def _refresh_group(self) -> bool:
        """Read the group's coordinator and epoch; whether either changed.

        Raises:
            ConsumerGroupNotFoundError: if the group no longer exists.
        """
        response = self._core.call_any(
            rpcs.FETCH_METADATA, api_pb2.FetchMetadataRequest(groups=[self._group])
        )
        for group in response.groupMetadata:
            if group.groupId != self._group:
                continue
            if group.error == api_pb2.ConsumerGroupMetadata.UNKNOWN_GROUP:
                raise ConsumerGroupNotFoundError(f"consumer group {self._group!r} does not exist")
            with self._lock:
                changed = (group.coordinator, int(group.epoch)) != (
                    self._coordinator,
                    self._epoch,
                )
                self._coordinator, self._epoch = group.coordinator, int(group.epoch)
            if changed:
                _log.info(
                    "consumer %s: coordinator %s, epoch %d",
                    self._group,
                    group.coordinator,
                    group.epoch,
                )
            return changed
        return False

    def _safe_refresh(self) -> bool:
        try:
            return self._refresh_group()
        except ConsumerGroupNotFoundError:
            raise
        except LiftbridgeError as exc:
            _log.warning("consumer %s: no group metadata: %s", self._group, exc)
            return False

    def _report_coordinator(self) -> None:
        with self._lock:
            coordinator, epoch = self._coordinator, self._epoch
        _log.warning(
            "consumer %s: coordinator %s unreachable for %.1fs; reporting it",
            self._group,
            coordinator,
            self._coordinator_timeout,
        )
        request = api_pb2.ReportConsumerGroupCoordinatorRequest(
            groupId=self._group, consumerId=self._consumer_id, coordinator=coordinator, epoch=epoch
        )
        try:
            self._core.call_any(
                rpcs.REPORT_CONSUMER_GROUP_COORDINATOR, request, context=CallContext.GROUP
            )
        except CoordinatorMismatchError:
            pass  # already replaced
        except LiftbridgeError as exc:
            _log.warning("consumer %s: reporting the coordinator failed: %s", self._group, exc)

    # ------------------------------------------------------------------ assignments

    def _reconcile(self, assignments: Iterable[api_pb2.PartitionAssignment], epoch: int) -> None:
        wanted = {(a.stream, int(p)) for a in assignments for p in a.partitions}
        with self._lock:
            if self._closed:
                return
            self._epoch = epoch
            revoked = [r for k, r in self._readers.items() if k not in wanted or r.failed]
            for reader in revoked:
                del self._readers[(reader.stream, reader.partition)]
            added = sorted(k for k in wanted if k not in self._readers)
        for reader in revoked:
            self._stop_reader(reader)
        if revoked:
            _log.info(
                "consumer %s: epoch %d: stopped %s",
                self._group,
                epoch,
                [(r.stream, r.partition) for r in revoked],
            )
            if self._auto_commit is not None:
                try:
                    self._commit_done((r.stream, r.partition) for r in revoked)
                except LiftbridgeError as exc:
                    _log.warning("consumer %s: commit on revoke failed: %s", self._group, exc)
        for stream, partition in added:
            reader = _Reader(stream, partition, epoch)
            with self._lock:
                if self._closed:
                    return
                self._readers[(stream, partition)] = reader
            reader.thread = threading.Thread(
                target=self._read,
                args=(reader,),
                name=f"liftbridge-consumer-{stream}-{partition}",
                daemon=True,
            )
            reader.thread.start()
        if added:
            _log.info("consumer %s: epoch %d: reading %s", self._group, epoch, added)

    def _stop_reader(self, reader: _Reader) -> None:
        with self._lock:
            reader.stopped = True
            sub = reader.sub
        if sub is not None:
            sub.close()
        self._mailbox.wake()
        thread = reader.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._core.options.rpc_timeout * 2 + 1.0)

    def _start_position(self, stream: str, partition: int) -> StartAt:
        cursor = self._core.fetch_cursor(self._cursor_id, stream, partition)
        if cursor >= 0:
            return StartAt.offset(cursor + 1)
        return self._start

    def _read(self, reader: _Reader) -> None:
        """Reader thread: subscribe as a group member and feed the mailbox."""
        core, stream, partition = self._core, reader.stream, reader.partition
        try:
            request = build_subscribe_request(
                core,
                stream,
                partition,
                self._start_position(stream, partition),
                None,
                read_isr_replica=False,
                resume=False,
                reverse=False,
            )
            assert request is not None  # no stop position: never empty
            request.consumer.CopyFrom(
                api_pb2.Consumer(
                    groupId=self._group, groupEpoch=reader.epoch, consumerId=self._consumer_id
                )
            )
            target = SubscriptionTarget(
                stream=stream,
                partition=partition,
                request=request,
                read_isr_replica=False,
                reverse=False,
            )
            sub = Subscription(core, target)
            with self._lock:
                if reader.stopped:
                    return
                reader.sub = sub
            sub.open(empty=False)
            for msg in sub:
                if not self._mailbox.put(reader, msg):
                    break
        except Exception as exc:
            if reader.stopped or self._stop.is_set():
                return
            _log.warning(
                "consumer %s: reading %s/%d failed (%s); retrying at the next poll",
                self._group,
                stream,
                partition,
                exc,
            )
            with self._lock:
                reader.failed = True
        finally:
            sub_ = reader.sub
            if sub_ is not None:
                sub_.close()
