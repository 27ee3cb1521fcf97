"""The transport seam under the publisher: one bidirectional ``PublishAsync`` stream.

The publisher only needs to send requests and to be told about responses and the end of
the stream. :class:`GrpcPublishStream` does that with grpcio's public API; a faster
transport (coalesced writes below grpcio's per-message operation, performance.md §10)
can replace it by implementing :class:`PublishStream` and a matching opener, without
touching the publisher. Either way the publisher is handed decoded answers (an ``Ack`` or
a ``Refusal`` of :mod:`~liftbridge_sync._wire.publish_codec`), never protobuf messages.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire.publish_codec import PREFIX_SIZE, Answer, DecodeError, decode_response
from liftbridge_sync._wire.status import (
    CallContext,
    error_from_rpc_error,
    error_from_status,
)
from liftbridge_sync.errors import (
    LiftbridgeError,
)

__all__ = [
    "GrpcPublishStream",
    "PublishStream",
    "StreamClosed",
    "StreamDraining",
    "StreamEvent",
    "StreamOpener",
    "StreamResponse",
    "StreamResponses",
    "StreamSent",
]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamResponse:
    """A response read from stream number ``epoch``, decoded (an ``Ack`` has
    ``partition`` -1: the publisher fills it in)."""

    epoch: int
    response: Answer


@dataclasses.dataclass(frozen=True, slots=True)
class StreamResponses:
    """Several responses read at once from stream ``epoch`` (one inbox item, not many)."""

    epoch: int
    responses: list[Answer]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamSent:
    """A request that asked for it was handed to the transport on stream ``epoch``."""

    epoch: int
    correlation_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class StreamClosed:
    """Stream number ``epoch`` ended; ``error`` is ``None`` for a clean end."""

    epoch: int
    error: LiftbridgeError | None
    #: Whether a broker was ever reached (``False``: what was sent on it never left).
    reached: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class StreamDraining:
    """The broker of stream ``epoch`` is shutting down gracefully (GOAWAY with
    NO_ERROR that still covers the stream): it answers what it was sent and then ends
    the stream; new requests belong on another connection."""

    epoch: int


StreamEvent = StreamResponse | StreamResponses | StreamSent | StreamClosed | StreamDraining


class PublishStream(Protocol):
    """One open ``PublishAsync`` stream. Implementations must be thread-safe for ``send``.

    An implementation whose opening does not prove a broker was reached sets a
    ``confirmed = False`` attribute (the publisher reads it with ``getattr``, default
    ``True``); its first response, or ``StreamClosed.reached``, proves it later.
    """

    def send(self, request: api_pb2.PublishRequest, *, notify_sent: bool = False) -> None:
        """Queue a request for sending; never blocks.

        With ``notify_sent`` a :class:`StreamSent` event follows once the transport has
        written it (AckPolicy.NONE publishes complete then).
        """

    def send_framed(self, framed: bytes, note: str | None = None, direct: bool = False) -> None:
        """Queue a serialized request with its gRPC length prefix; never blocks.

        With ``note`` (the request's correlation id) a :class:`StreamSent` event follows
        once the transport has written it. ``direct`` hints that the caller waits for
        the answer next, so writing on the calling thread may save a hand-off.
        """

    def send_many(self, framed: list[bytes]) -> None:
        """:meth:`send_framed` for several requests at once (no notes)."""

    def answer_here(self, done: Callable[[], bool]) -> None:
        """Optionally read responses on the calling thread until ``done()`` (a
        ``publish()`` caller waiting for its ack); may return at any time."""

    def probe(self) -> None:
        """Check that the peer is alive (a PING); a dead one ends the stream."""

    def queued_mark(self) -> int:
        """A mark for everything queued so far (see :meth:`written_through`)."""

    def written_through(self, mark: int) -> bool:
        """Whether everything queued before :meth:`queued_mark` gave ``mark`` has left
        this client's queues (handed to the socket, or to grpcio, which wrote it)."""

    def close(self) -> None:
        """Half-close: no more requests; responses keep arriving until the server ends."""

    def cancel(self) -> None:
        """Abort the stream; a :class:`StreamClosed` event follows."""

    def join(self, timeout: float | None) -> None:
        """Wait for the stream's reader to finish."""


#: Opens stream ``epoch`` to the broker at ``address`` (channels and TLS settings come
#: from the core); every response and the end of the stream go to ``on_event``. An
#: opener that blocks (connects) does so only until the :class:`DialAbort` aborts (then
#: it raises ``ClientClosedError``), and at most until the deadline it is given (a
#: :func:`time.monotonic` time, or ``None``: ``rpc_timeout`` from now).
StreamOpener = Callable[
    [ClientCore, str, int, Callable[[StreamEvent], None], DialAbort, float | None],
    PublishStream,
]

_END = object()


@dataclasses.dataclass(frozen=True, slots=True)
class _Notify:
    message: bytes
    correlation_id: str


#: The method of ``PublishAsync``, for a call that passes bytes through both ways.
_PUBLISH_ASYNC = "/proto.API/PublishAsync"


class GrpcPublishStream:
    """``PublishAsync`` over grpcio's public streaming API.

    The call passes bytes through both ways (no serializer, no deserializer): requests
    are the codec's serialized messages, and responses are decoded here by the codec.
    Requests go through a queue to gRPC's request-iterator thread; a reader thread named
    ``liftbridge-publish-reader`` turns each response into an event and holds no state of
    its own. grpcio connects lazily, so an open stream proves no broker was reached
    (``confirmed`` is ``False``): its first response does, and :class:`StreamClosed`
    says whether one came. Thread-safe.
    """

    #: Whether opening the stream proved a broker was reached (see above).
    confirmed = False

    def __init__(
        self,
        channel: grpc.Channel,
        epoch: int,
        on_event: Callable[[StreamEvent], None],
        error_of: Callable[[grpc.RpcError], LiftbridgeError] | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        #: Called once the call is over (by the reader thread, last): gives the channel
        #: back to the pool (see ChannelPool.release).
        self._on_done = on_done or (lambda: None)
        self._error_of = error_of or (lambda exc: error_from_rpc_error(exc, CallContext.GENERIC))
        self._reached = False
        self._epoch = epoch
        self._on_event = on_event
        self._requests: queue.SimpleQueue[object] = queue.SimpleQueue()
        # Counted by grpcio's consumer thread only: requests taken off the queue, and
        # of those sent (grpcio asks for the next request only once one is sent).
        self._taken = 0
        self._written = 0
        self._finished = threading.Event()
        publish_async = channel.stream_stream(
            _PUBLISH_ASYNC,
            None,  # requests are bytes already
            None,  # responses stay bytes: decoded below
            _registered_method=True,  # type: ignore[call-arg]  # as grpcio's stubs do
        )
        self._call: Any = publish_async(self._request_iterator())
        self._reader = threading.Thread(
            target=self._read, name="liftbridge-publish-reader", daemon=True
        )
        self._reader.start()

    def _request_iterator(self) -> Iterator[bytes]:
        # Poll with a timeout so that gRPC's consumer thread exits once the call is over,
        # even if nobody enqueues the end marker (grpc#21995).
        while not self._finished.is_set():
            try:
                item = self._requests.get(timeout=0.25)
            except queue.Empty:
                continue
            if item is _END:
                return
            self._taken += 1
            if isinstance(item, _Notify):
                yield item.message
                # gRPC asks for the next request only after this one's send completed.
                self._written += 1
                self._on_event(StreamSent(self._epoch, item.correlation_id))
                continue
            assert isinstance(item, bytes)
            yield item
            self._written += 1

    def _read(self) -> None:
        error: LiftbridgeError | None = None
        try:
            for response in self._call:
                self._reached = True
                self._on_event(StreamResponse(self._epoch, decode_response(response)))
        except grpc.RpcError as exc:
            error = self._error_of(exc)
        except DecodeError as exc:  # what grpcio's deserializer would have refused
            error = error_from_status(grpc.StatusCode.INTERNAL, f"bad response: {exc}")
            self._call.cancel()
        finally:
            self._finished.set()
            try:
                self._on_event(StreamClosed(self._epoch, error, self._reached))
            finally:
                self._on_done()

    def send(self, request: api_pb2.PublishRequest, *, notify_sent: bool = False) -> None:
        """Queue ``request`` for gRPC's request-iterator thread."""
        message = request.SerializeToString()
        self._requests.put(_Notify(message, request.correlationId) if notify_sent else message)

    def send_framed(self, framed: bytes, note: str | None = None, direct: bool = False) -> None:
        """Queue a framed request (its message as it is: grpcio adds its own prefix)."""
        message = framed[PREFIX_SIZE:]
        self._requests.put(message if note is None else _Notify(message, note))

    def send_many(self, framed: list[bytes]) -> None:
        """Queue several framed requests."""
        for item in framed:
            self.send_framed(item)

    def answer_here(self, done: Callable[[], bool]) -> None:
        """grpcio's own threads read the responses: nothing to do here."""

    def probe(self) -> None:
        """Nothing to do: grpcio's own keepalive (``grpc_options``) watches the peer."""

    def queued_mark(self) -> int:
        """Requests queued so far (taken by grpcio, or still waiting)."""
        return self._taken + self._requests.qsize()

    def written_through(self, mark: int) -> bool:
        """Whether grpcio has sent the first ``mark`` requests."""
        return self._written >= mark

    def close(self) -> None:
        """Half-close the stream after the queued requests."""
        self._requests.put(_END)

    def cancel(self) -> None:
        """Abort the call."""
        self._finished.set()
        self._requests.put(_END)
        self._call.cancel()

    def join(self, timeout: float | None) -> None:
        """Wait for the reader thread."""
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout)


def open_grpc_stream(
    core: ClientCore,
    address: str,
    epoch: int,
    on_event: Callable[[StreamEvent], None],
    abort: DialAbort | None = None,
    deadline: float | None = None,
) -> PublishStream:
    """The ``"grpc"`` :data:`StreamOpener`: grpcio's public streaming API. grpcio
    connects later, on its own threads (``deadline`` has nothing to bound); with TLS,
    the first channel to a broker waits for its pre-flight
    (:meth:`~.channels.ChannelPool.check_tls`), which ``abort`` ends."""
    if abort is not None:
        abort.check()
        core.pool.check_tls(address, abort=abort)  # channel() then finds it checked
    channel = core.pool.channel(address)
    try:
        return GrpcPublishStream(
            channel,
            epoch,
            on_event,
            lambda exc: core.error_of(exc, CallContext.GENERIC, address),
            on_done=lambda: core.pool.release(channel),
        )
    except BaseException:
        core.pool.release(channel)
        raise
