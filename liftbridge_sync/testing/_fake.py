"""A scripted, in-process fake Liftbridge broker for fault injection in tests.

Like httpx's ``MockTransport``, it lets you test how *your* code behaves when Liftbridge
misbehaves, without a server: brokers that answer UNAVAILABLE, leaders that move, acks
that are lost or slow, subscriptions that break mid-stream. It is not a Liftbridge
server: it stores nothing, and its metadata is whatever you script. Test real behaviour
against a real server (:class:`~liftbridge_sync.testing.LiftbridgeServer`).

Example::

    from liftbridge_sync import Client
    from liftbridge_sync.testing import FakeBroker, refuse, serve

    with FakeBroker() as broker:
        broker.publish_script = lambda request, n: "drop" if n == 2 else "ack"
        broker.subscribe_scripts = [serve([0, 1], then=("UNAVAILABLE", "gone")), serve([2])]
        with Client(broker.address) as client:
            ...
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any

import grpc

from liftbridge_sync._proto import api_pb2, api_pb2_grpc
from liftbridge_sync.errors import ArgumentTypeError, ConfigurationError

__all__ = [
    "AdminScript",
    "FakeBroker",
    "FakeCluster",
    "PublishScript",
    "SubscribeScript",
    "fake_message",
    "refuse",
    "serve",
    "silent",
]

#: Decides what happens to one ``PublishAsync`` request (the request, and how many
#: requests the broker has received so far, this one included):
#:
#: * ``"ack"``: store it and acknowledge it (offsets count up per stream partition, and
#:   the partition's newest offset in ``FetchPartitionMetadata`` follows them);
#: * ``"drop"``: never answer (a publish lost on its way to the leader);
#: * ``"store"``: store it, never answer (an ack lost on its way back);
#: * ``"abort"``: end the whole stream with UNAVAILABLE (a broker going away);
#: * ``("delay", seconds)``: store it at once, acknowledge it after ``seconds`` (a slow
#:   ack);
#: * an ``int``: answer with that ``PublishAsyncError`` code (e.g. 4 = READONLY);
#: * ``("error", code, message)``: that ``PublishAsyncError`` with that message (e.g.
#:   ``("error", 3, "failed to publish to NATS: nats: connection closed")``, what the
#:   real server answers while its NATS connection is down);
#: * ``("error_then_ack", code)``: that error, then an ack for the same id (a quirk of
#:   the real server on PERMISSION_DENIED).
#: * ``("shared_subject", [(stream, ack_error), ...])``: first the answers of other
#:   streams on the same subject, each storing it too (``ack_error`` an ``Ack.Error``
#:   value such as ``api_pb2.Ack.INCORRECT_OFFSET``, or 0 for an ack), then its own ack;
#:   ``("shared_subject", [...], "drop")``: the other streams' answers only (the
#:   publish lost on its way to its own stream's leader).
#:
#: Anything else (a typo such as ``"dorp"``, ``None`` from a script that forgot to
#: return, ``("dealy", 5)``) is a :class:`~liftbridge_sync.errors.ConfigurationError`
#: naming the valid actions: the publish call ends with INTERNAL carrying that message,
#: and :meth:`FakeBroker.stop` raises it, so the test fails where the typo is.
PublishScript = Callable[[api_pb2.PublishRequest, int], Any]

#: Decides how one ``CreateStream`` or ``DeleteStream`` call ends (the method's name, and
#: how many calls of it the broker has received so far, this one included):
#:
#: * ``"ok"``: success;
#: * ``"exists"``: ALREADY_EXISTS (CreateStream: the name is taken);
#: * ``"missing"``: NOT_FOUND (DeleteStream: no such stream);
#: * ``"lost"``: UNAVAILABLE after the broker acted on it, as when the connection breaks
#:   before the answer arrives (the client cannot tell whether it happened).
#:
#: Anything else is a :class:`~liftbridge_sync.errors.ConfigurationError`, handled as a
#: bad :data:`PublishScript` action is.
AdminScript = Callable[[str, int], str]

#: Runs one ``Subscribe`` call: yields the messages to send (the first being the
#: server's empty handshake message) and may end the call with ``context.abort``.
SubscribeScript = Callable[
    [api_pb2.SubscribeRequest, grpc.ServicerContext], Iterator[api_pb2.Message]
]


@dataclasses.dataclass
class FakeCluster:
    """What the brokers of one fake cluster say in their metadata. Change it any time.

    Attributes:
        leader: Id of the broker that leads every partition.
        streams: Stream names listed when metadata for all streams is asked.
        partitions: Partitions per stream.
        newest_offset: Reported by ``FetchPartitionMetadata`` (-1: empty), or the
            offset of the newest publish the asked broker stored if that is higher
            (the log moves as a leader acknowledges, as a real one's does).
        high_watermark: Reported by ``FetchPartitionMetadata`` (``None``: the newest
            offset, everything committed).
        brokers: The brokers registered so far (in order of creation).

    Not thread-safe to mutate while calls are in flight, except by plain attribute
    assignment (which tests do between steps).
    """

    leader: str = "fake"
    streams: tuple[str, ...] = ("s",)
    partitions: int = 1
    newest_offset: int = -1
    high_watermark: int | None = None
    brokers: list[FakeBroker] = dataclasses.field(default_factory=list)


_PUBLISH_ACTIONS = (
    '"ack", "drop", "store", "abort", ("delay", seconds), an int error code, '
    '("error", code, message), ("error_then_ack", code), '
    '("shared_subject", [(stream, ack_error), ...]) or ("shared_subject", [...], "drop")'
)
_ADMIN_ACTIONS = ("ok", "exists", "missing", "lost")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bad_publish_action(action: object) -> ConfigurationError:
    return ConfigurationError(
        f"FakeBroker: the publish script returned {action!r}, which is not an action; "
        f"valid actions: {_PUBLISH_ACTIONS}"
    )


def _check_publish_action(action: object) -> None:
    """Raise :class:`ConfigurationError` unless ``action`` is a :data:`PublishScript`
    action. The dispatch in ``PublishAsync`` reads tuples by position, so a misspelt
    tag would otherwise be taken for another action (``("dealy", 5)`` for code 5)."""
    if _is_int(action) or action in ("ack", "drop", "store", "abort"):
        return
    if not isinstance(action, tuple) or not action:
        raise _bad_publish_action(action)
    tag, args = action[0], action[1:]
    if tag == "delay" and len(args) == 1 and isinstance(args[0], int | float):
        if not isinstance(args[0], bool) and args[0] >= 0:
            return
    elif tag == "error" and len(args) == 2 and _is_int(args[0]) and isinstance(args[1], str):
        return
    elif tag == "error_then_ack" and len(args) == 1 and _is_int(args[0]):
        return
    elif tag == "shared_subject" and len(args) in (1, 2) and args[1:] in ((), ("drop",)):
        others = args[0]
        if isinstance(others, list | tuple) and all(
            isinstance(one, tuple) and len(one) == 2 and isinstance(one[0], str) and _is_int(one[1])
            for one in others
        ):
            return
    raise _bad_publish_action(action)


def _status_code(code: object) -> grpc.StatusCode:
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, str) and code in grpc.StatusCode.__members__:
        return grpc.StatusCode[code]
    raise ConfigurationError(
        f"{code!r} is not a gRPC status: give a grpc.StatusCode or one of its names "
        f"({', '.join(grpc.StatusCode.__members__)})"
    )


def _callable(name: str, script: Any) -> Any:
    if not callable(script):
        raise ArgumentTypeError(
            f"FakeBroker.{name} must be a callable (request or method, count) -> action, "
            f"got {type(script).__name__}"
        )
    return script


def fake_message(offset: int, partition: int = 0, stream: str = "s") -> api_pb2.Message:
    """A message at ``offset`` with value ``b"v<offset>"``."""
    return api_pb2.Message(
        offset=offset, value=b"v%d" % offset, stream=stream, partition=partition, subject=stream
    )


def _wait_until_cancelled(context: grpc.ServicerContext) -> None:
    while context.is_active():
        time.sleep(0.02)


def serve(
    offsets: Sequence[int] = (),
    then: tuple[str | grpc.StatusCode, str] | str = "hang",
    *,
    handshake: bool = True,
) -> SubscribeScript:
    """A subscribe script: the handshake, the messages at ``offsets``, then ``then``.

    Args:
        offsets: Offsets of the messages to send.
        then: ``"hang"`` (keep the call open until the client cancels), ``"end"`` (end
            with OK), or ``(code, details)`` to end with that status; ``code`` is a
            ``grpc.StatusCode`` or its name.
        handshake: Send the server's empty first message.

    Raises:
        ConfigurationError: ``then`` is none of these (checked here, not in the gRPC
            thread that runs the script, where a typo would only end the call).

    Thread-safe: the script it returns keeps no state between calls.
    """
    status: grpc.StatusCode | None = None
    details = ""
    if isinstance(then, tuple) and len(then) == 2 and isinstance(then[1], str):
        status, details = _status_code(then[0]), then[1]
    elif then not in ("hang", "end"):
        raise ConfigurationError(
            f"serve(then={then!r}): give 'hang', 'end' or (status code or its name, details)"
        )

    def script(
        request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        if handshake:
            yield api_pb2.Message()
        for offset in offsets:
            yield fake_message(offset, request.partition, request.stream or "s")
        if status is not None:
            context.abort(status, details)
        elif then == "hang":
            _wait_until_cancelled(context)

    return script


def refuse(code: str | grpc.StatusCode, details: str) -> SubscribeScript:
    """A subscribe script that ends the call with a status before the handshake.

    Raises:
        ConfigurationError: ``code`` is not a ``grpc.StatusCode`` or its name, or
            ``details`` is not a str.

    Thread-safe: the script it returns keeps no state between calls.
    """
    return serve([], (code, details), handshake=False)


def silent() -> SubscribeScript:
    """A subscribe script that never answers, not even the handshake."""
    return serve([], "hang", handshake=False)


class FakeBroker(api_pb2_grpc.APIServicer):
    """A scripted fake broker listening on ``127.0.0.1:<random port>``.

    Args:
        broker_id: The broker's id in metadata.
        cluster: Shared with the other brokers of a fake cluster (default: a cluster of
            its own, led by this broker).
        max_workers: Threads serving calls (named ``liftbridge-fake-broker*``, ended
            by :meth:`stop`).
        advertised_port: The port given for this broker in metadata (default: its own),
            e.g. an :class:`~liftbridge_sync.testing._h2abuse.H2Abuser` in front of it.
        server_options: grpcio server options, e.g. ``[("grpc.http2.bdp_probe", 0)]``
            for a broker whose flow-control windows stay small (with the default
            bandwidth probing they grow to tens of MiB, more on a loaded machine).

    Attributes:
        address: ``host:port`` to give a ``Client``.
        publish_script: See :data:`PublishScript` (default: ack everything).
        subscribe_scripts: Scripts for the next ``Subscribe`` calls, used in order; when
            none is left, a call gets :func:`silent`.
        admin_script: See :data:`AdminScript` (default: every call succeeds).
        admin_calls: Every ``CreateStream`` and ``DeleteStream`` call's method name.
        not_leader_times: Answer the next N ``FetchPartitionMetadata`` calls with
            "not partition leader".
        received: Every ``PublishRequest`` received.
        subscribe_requests: Every ``SubscribeRequest`` received.
        streams_opened, metadata_calls, partition_metadata_calls: Counters.
        script_errors: The :class:`~liftbridge_sync.errors.ConfigurationError` of every
            action a script returned that is not one (the call it answered ended with
            INTERNAL); :meth:`stop` raises the first.

    Raises:
        ArgumentTypeError: ``publish_script`` or ``admin_script`` is set to something
            that is not callable.

    Use it as a context manager (or :meth:`start` / :meth:`stop`). Thread-safe: gRPC
    calls its methods from a thread pool; counters and lists are updated under a lock.
    """

    def __init__(
        self,
        broker_id: str = "fake",
        cluster: FakeCluster | None = None,
        max_workers: int = 16,
        advertised_port: int | None = None,
        server_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.broker_id = broker_id
        self.cluster = cluster if cluster is not None else FakeCluster(leader=broker_id)
        self.cluster.brokers.append(self)
        self.lock = threading.Lock()
        self._publish_script: PublishScript = lambda request, count: "ack"
        self.subscribe_scripts: list[SubscribeScript] = []
        self._admin_script: AdminScript = lambda method, count: "ok"
        self.script_errors: list[ConfigurationError] = []
        self.admin_calls: list[str] = []
        self.not_leader_times = 0
        self.received: list[api_pb2.PublishRequest] = []
        self.subscribe_requests: list[api_pb2.SubscribeRequest] = []
        self.streams_opened = 0
        self.metadata_calls = 0
        self.partition_metadata_calls = 0
        self._offsets: dict[tuple[str, int], int] = {}
        self._executor = futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="liftbridge-fake-broker"
        )
        self._server = grpc.server(self._executor, options=list(server_options))
        api_pb2_grpc.add_APIServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.advertised_port = advertised_port

    @property
    def publish_script(self) -> PublishScript:
        """See :data:`PublishScript`; its actions are checked as it returns them."""
        return self._publish_script

    @publish_script.setter
    def publish_script(self, script: PublishScript) -> None:
        self._publish_script = _callable("publish_script", script)

    @property
    def admin_script(self) -> AdminScript:
        """See :data:`AdminScript`; its actions are checked as it returns them."""
        return self._admin_script

    @admin_script.setter
    def admin_script(self, script: AdminScript) -> None:
        self._admin_script = _callable("admin_script", script)

    def _script_failed(self, error: ConfigurationError, context: grpc.ServicerContext) -> None:
        # Ending the call alone could pass unseen (a client retries, or a test expects
        # a failure anyway): stop() raises it too.
        with self.lock:
            self.script_errors.append(error)
        context.abort(grpc.StatusCode.INTERNAL, str(error))

    def start(self) -> FakeBroker:
        """Start serving."""
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop at once: calls in flight end with UNAVAILABLE (a broker dying). Returns
        once the threads serving calls (``liftbridge-fake-broker*``) have ended, that
        is once every script running has returned.

        Raises:
            ConfigurationError: A script returned an action that is not one (the first
                of :attr:`script_errors`), once the broker has stopped.
        """
        self._server.stop(grace=None).wait()
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self.lock:
            first = self.script_errors[0] if self.script_errors else None
        if first is not None:
            raise first

    def stop_gracefully(self, grace: float) -> threading.Event:
        """Start a graceful shutdown, as grpc-go's ``GracefulStop``: every connection
        gets ``GOAWAY(NO_ERROR)``, new connections are refused, and calls in flight go
        on (publishes keep being read and acknowledged, per :attr:`publish_script`)
        until they end or ``grace`` seconds pass. Returns an event set once stopped."""
        return self._server.stop(grace)

    def __enter__(self) -> FakeBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def subscribe_starts(self) -> list[tuple[int, int]]:
        """``(startPosition, startOffset)`` of every ``Subscribe`` received."""
        with self.lock:
            return [(r.startPosition, r.startOffset) for r in self.subscribe_requests]

    # ------------------------------------------------------------------ metadata

    def FetchMetadata(  # noqa: N802 - gRPC method name
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        with self.lock:
            self.metadata_calls += 1
        cluster = self.cluster
        ids = [b.broker_id for b in cluster.brokers]
        partitions = {
            p: api_pb2.PartitionMetadata(id=p, leader=cluster.leader, replicas=ids, isr=ids)
            for p in range(cluster.partitions)
        }
        names = list(request.streams) or list(cluster.streams)
        return api_pb2.FetchMetadataResponse(
            brokers=[
                api_pb2.Broker(id=b.broker_id, host="127.0.0.1", port=b.advertised_port or b.port)
                for b in cluster.brokers
            ],
            streamMetadata=[
                api_pb2.StreamMetadata(name=name, subject=name, partitions=partitions)
                for name in names
            ],
        )

    # ------------------------------------------------------------------ streams

    def _admin(self, method: str, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.admin_calls.append(method)
            count = self.admin_calls.count(method)
        action = self.admin_script(method, count)
        if action == "exists":
            context.abort(grpc.StatusCode.ALREADY_EXISTS, "stream already exists")
        elif action == "missing":
            context.abort(grpc.StatusCode.NOT_FOUND, "stream does not exist")
        elif action == "lost":
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: Socket closed")
        elif action != "ok":
            self._script_failed(
                ConfigurationError(
                    f"FakeBroker: the admin script returned {action!r} for {method}, "
                    f"which is not an action; valid actions: {', '.join(_ADMIN_ACTIONS)}"
                ),
                context,
            )

    def CreateStream(  # noqa: N802
        self, request: api_pb2.CreateStreamRequest, context: grpc.ServicerContext
    ) -> api_pb2.CreateStreamResponse:
        self._admin("CreateStream", context)
        return api_pb2.CreateStreamResponse()

    def DeleteStream(  # noqa: N802
        self, request: api_pb2.DeleteStreamRequest, context: grpc.ServicerContext
    ) -> api_pb2.DeleteStreamResponse:
        self._admin("DeleteStream", context)
        return api_pb2.DeleteStreamResponse()

    def FetchPartitionMetadata(  # noqa: N802
        self, request: api_pb2.FetchPartitionMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchPartitionMetadataResponse:
        with self.lock:
            self.partition_metadata_calls += 1
            refuse_now = self.not_leader_times > 0
            if refuse_now:
                self.not_leader_times -= 1
        if refuse_now:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "The request should be sent to partition leader",
            )
        with self.lock:
            stored = self._offsets.get((request.stream, request.partition), -1)
        newest = max(self.cluster.newest_offset, stored)
        committed = self.cluster.high_watermark
        return api_pb2.FetchPartitionMetadataResponse(
            metadata=api_pb2.PartitionMetadata(
                id=request.partition,
                leader=self.broker_id,
                newestOffset=newest,
                highWatermark=newest if committed is None else committed,
            )
        )

    # ------------------------------------------------------------------ subscribing

    def Subscribe(  # noqa: N802
        self, request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        with self.lock:
            self.subscribe_requests.append(request)
            script = self.subscribe_scripts.pop(0) if self.subscribe_scripts else silent()
        yield from script(request, context)

    # ------------------------------------------------------------------ publishing

    def PublishAsync(  # noqa: N802
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        with self.lock:
            self.streams_opened += 1
        for request in request_iterator:
            with self.lock:
                self.received.append(request)
                count = len(self.received)
            action = self._publish_script(request, count)
            try:
                _check_publish_action(action)
            except ConfigurationError as exc:
                self._script_failed(exc, context)
            if action == "drop":
                continue
            if action == "store":
                self._store(request)
                continue
            if action == "ack" and request.ackPolicy == api_pb2.NONE:
                self._store(request)  # stored, but the real server answers no NONE
                continue
            if action == "abort":
                context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: broker going away")
            if isinstance(action, tuple) and action[0] == "delay":
                # Stored when read, as the real server's log takes it before the ack
                # goes out: the log moves while the ack is slow.
                offset = self._store(request)
                time.sleep(float(action[1]))
                if request.ackPolicy != api_pb2.NONE:  # the real server answers no NONE
                    yield self._ack(request, offset)
                continue
            if isinstance(action, tuple) and action[0] == "shared_subject":
                for stream, ack_error in action[1]:
                    other = api_pb2.PublishRequest()
                    other.CopyFrom(request)
                    other.stream, other.partition = stream, 0
                    answer = self._ack(other, -1 if ack_error else self._store(other))
                    answer.ack.ackError = ack_error
                    yield answer
                if action[2:] != ("drop",):
                    yield self._ack(request, self._store(request))
                continue
            message = "scripted"
            if isinstance(action, tuple) and action[0] == "error":
                action, message = action[1], action[2]
            code = action[1] if isinstance(action, tuple) else action
            if isinstance(code, int):
                yield api_pb2.PublishResponse(
                    correlationId=request.correlationId,
                    asyncError=api_pb2.PublishAsyncError(code=code, message=message),  # type: ignore[arg-type]
                    ack=api_pb2.Ack(),
                )
                if not isinstance(action, tuple):
                    continue
            yield self._ack(request, self._store(request))

    def _store(self, request: api_pb2.PublishRequest) -> int:
        key = (request.stream, request.partition)
        with self.lock:
            offset = self._offsets.get(key, -1) + 1
            self._offsets[key] = offset
        return offset

    def _ack(self, request: api_pb2.PublishRequest, offset: int) -> api_pb2.PublishResponse:
        return api_pb2.PublishResponse(
            correlationId=request.correlationId,
            ack=api_pb2.Ack(
                stream=request.stream,
                offset=offset,
                correlationId=request.correlationId,
                ackPolicy=request.ackPolicy,
            ),
        )
