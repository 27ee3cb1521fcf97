"""The transport seam: publish streams and subscribe calls of either kind, one interface.

The client's options choose a transport per direction (``publish_transport``,
``subscribe_transport``: ``"h2"``, our own HTTP/2 connection, or ``"grpc"``, grpcio's
streaming API). That choice is made here and nowhere above: :func:`publish_opener` gives
the publisher a :data:`~.publish_stream.StreamOpener`, :func:`open_subscribe` gives a
subscription a :class:`SubscribeCall`. Either kind of call fails with the
:class:`~liftbridge_sync.errors.LiftbridgeError` its status means (mapped by
:mod:`liftbridge_sync._wire.status`, the one mapping), so nothing above the transport
sees grpc: the error's ``code`` is the gRPC status name, and a failure before the
server's handshake message is mapped as opening the subscription
(``CallContext.SUBSCRIBE_OPEN``), one after it as ending a running one
(``CallContext.SUBSCRIPTION``). Functions are thread-safe; a call is as thread-safe as
:class:`SubscribeCall` says.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.aborting import DialAbort
from liftbridge_sync._transport.channels import Releaser
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._transport.h2.dial import open_h2_stream
from liftbridge_sync._transport.h2_subscribe import H2SubscribeCall
from liftbridge_sync._transport.publish_stream import StreamOpener, open_grpc_stream
from liftbridge_sync._wire.status import CallContext, error_from_rpc_error, error_from_status
from liftbridge_sync.errors import ClientClosedError

__all__ = ["SubscribeCall", "open_subscribe", "publish_opener"]


class SubscribeCall(Protocol):
    """One ``Subscribe`` call, read by one thread at a time; ``cancel()`` from any thread.

    ``next()`` returns the next wire ``Message`` (the first is the server's empty
    handshake), raises ``StopIteration`` when the server ended the stream with OK, and a
    :class:`~liftbridge_sync.errors.LiftbridgeError` otherwise (``code`` ``"CANCELLED"``
    after ``cancel()``), after every message received before the end was handed out.
    """

    #: Whether :meth:`read_batch` hands out more than one message at a time.
    batched: bool

    def __next__(self) -> api_pb2.Message: ...

    def read_batch(self, deadline: float | None = None) -> list[api_pb2.Message]:
        """Every received message not handed out yet (at least one); raises as ``next()``,
        and ``TimeoutError`` when nothing came by ``deadline`` (``time.monotonic()``; the
        call stays usable)."""
        ...

    def cancel(self) -> None:
        """End the call; a blocked read raises ``CANCELLED``. Idempotent."""
        ...


def publish_opener(transport: str) -> StreamOpener:
    """How the publisher opens its ``PublishAsync`` streams: ``"h2"`` or ``"grpc"``."""
    return open_h2_stream if transport == "h2" else open_grpc_stream


def open_subscribe(
    core: ClientCore, address: str, request: api_pb2.SubscribeRequest, *, batched: bool
) -> SubscribeCall:
    """A ``Subscribe`` call to ``address`` over the client's ``subscribe_transport``.

    Args:
        core: The client's core (options, channels and TLS set-up).
        address: ``host:port`` of the broker.
        request: The request to send.
        batched: Whether the reader takes messages in batches; the grpc transport hands
            them out one at a time whatever this says.

    Nothing is sent before the call's first read, which also makes the broker's TLS
    pre-flight (the call's ``cancel()`` abandons it), and raises what opening it raised:
    ``ClientClosedError`` if the client is closed (or was closed as the call was made).
    """
    options = core.options
    if options.subscribe_transport == "h2":
        # The diagnosis the grpcio channels get (and their TLS set-up), made by the
        # call's first read so that its cancel() (close(), a get() deadline) ends it.
        pool = core.pool
        call = H2SubscribeCall(
            address,
            request,
            options,
            pool.tls,
            preflight=lambda abort: pool.check_tls(address, abort=abort),
        )
        call.batched = batched
        return call
    # The TLS pre-flight (up to 5 s) and the call are made by the first read, so that
    # cancel() (close(), a get() deadline) ends the pre-flight too.
    return _GrpcSubscribeCall(core, address, request)


class _GrpcSubscribeCall:
    """A grpcio ``Subscribe`` call whose failures are Liftbridge errors, made by the
    first read (after the broker's TLS pre-flight, which :meth:`cancel` abandons).

    One reading thread at a time; ``cancel()`` is thread-safe.
    """

    __slots__ = (
        "_abort",
        "_address",
        "_call",
        "_cancelled",
        "_core",
        "_lock",
        "_opened",
        "_release",
        "_request",
    )

    batched = False

    def __init__(self, core: ClientCore, address: str, request: api_pb2.SubscribeRequest) -> None:
        self._core = core
        self._address = address
        self._request = request
        self._lock = threading.Lock()
        #: Abandons the TLS pre-flight (see ChannelPool.check_tls).
        self._abort = DialAbort()
        self._cancelled = False
        self._call: Any = None  # the grpcio call, once made
        self._opened = False  # the handshake message arrived
        #: Gives the channel back to the pool once the call ended (ended, failed or
        #: cancelled, or dropped unread: see __del__): its broker's channel may then be
        #: closed (ChannelPool.retire).
        self._release: Releaser | None = None

    def __iter__(self) -> _GrpcSubscribeCall:
        return self

    def _start(self) -> Any:
        """Make the grpcio call (after the TLS pre-flight, if the broker had none yet)."""
        core, address = self._core, self._address
        try:
            core.pool.check_tls(address, abort=self._abort)
        except ClientClosedError:
            if not self._abort.aborted:
                raise
            raise error_from_status(
                grpc.StatusCode.CANCELLED, "subscription call cancelled", CallContext.SUBSCRIBE_OPEN
            ) from None
        stub = core.pool.stub(address, streaming_reads=True)
        release = core.pool.releaser(stub)
        try:
            call = stub.Subscribe(self._request)
        except ValueError:
            release()
            # grpcio's "Cannot invoke RPC on closed channel!": close() won the race for
            # the channel between the stub's lookup and the call.
            if core.closed:
                raise ClientClosedError("subscribe: the client was closed") from None
            raise
        except BaseException:
            release()
            raise
        with self._lock:
            self._call, self._release = call, release
            cancelled = self._cancelled
        if cancelled:  # cancel() came while the call was being made
            call.cancel()
            release()
        return call

    def __next__(self) -> api_pb2.Message:
        call = self._call
        if call is None:
            call = self._start()
        try:
            message: api_pb2.Message = next(call)
        except StopIteration:
            self._done()
            raise
        except grpc.RpcError as exc:
            self._done()
            if self._opened:
                raise error_from_rpc_error(exc, CallContext.SUBSCRIPTION) from None
            # Before the handshake: also tells a TLS-only broker from a passing failure.
            raise self._core.error_of(exc, CallContext.SUBSCRIBE_OPEN, self._address) from None
        except ValueError as exc:
            # grpcio's "Internal gRPC call error N": the call's own state is broken (a
            # read interrupted half-way, by a Ctrl-C, leaves its operation in flight,
            # and the next one collides with it). A new call repairs it: retryable.
            call.cancel()
            self._done()
            context = CallContext.SUBSCRIPTION if self._opened else CallContext.SUBSCRIBE_OPEN
            raise error_from_status(
                grpc.StatusCode.UNAVAILABLE, f"the grpcio call broke ({exc})", context
            ) from None
        self._opened = True
        return message

    def _done(self) -> None:
        release = self._release
        if release is not None:
            release()

    def read_batch(self, deadline: float | None = None) -> list[api_pb2.Message]:
        """The next message, as a batch of one. grpcio's reads take no deadline: it is
        not honoured here (a reader that needs one cancels the call from a timer)."""
        return [next(self)]

    def cancel(self) -> None:
        """Cancel the grpcio call, or abandon the TLS pre-flight before it."""
        self._abort.abort()
        with self._lock:
            self._cancelled = True
            call, release = self._call, self._release
        if call is not None:
            call.cancel()
        if release is not None:
            release()

    def __del__(self) -> None:
        # Dropped without an end (a subscription never closed): grpcio cancels its own
        # call when it is collected, but the pool would count the call until the
        # client closed, and a departed broker's channel would stay open with it. The
        # collector may run this on a thread holding the pool's lock: the release is
        # queued for the pool's next operation, without a lock.
        release = getattr(self, "_release", None)  # unset if __init__ failed
        if release is not None:
            release.later()
