"""gRPC channels, one set per broker address.

Two channels are kept per address: one for unary RPCs and the ``PublishAsync`` stream,
and one for ``Subscribe`` that uses gRPC's experimental ``SingleThreadedUnaryStream``
option, which reads a server stream on the calling thread with no hand-off (measured 5-8x
cheaper per message than the default on a 2-core VM; performance.md §6.3).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc
import grpc.experimental

from liftbridge_sync._proto import api_pb2_grpc
from liftbridge_sync.errors import ClientClosedError, ForkedClientError
from liftbridge_sync.options import ClientOptions

__all__ = ["ChannelPool", "Stub"]

Stub = api_pb2_grpc.APIStub

#: Defaults that avoid failures rather than add speed: large messages are legal up to the
#: server's limits; brokers on private addresses must not be sent through an HTTP proxy
#: picked up from the environment; and a restarted broker is redialled within a second or
#: two instead of gRPC's default back-off (1 s growing to 120 s), which would otherwise
#: dominate failover time.
_BASE_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class ChannelPool:
    """Lazily created gRPC channels and stubs keyed by ``host:port``.

    Thread-safe.
    """

    def __init__(
        self,
        options: ClientOptions,
        *,
        channel_factory: Callable[[str, list[tuple[str, Any]]], grpc.Channel] | None = None,
    ) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._stubs: dict[tuple[str, bool], tuple[grpc.Channel, Stub]] = {}
        self._closed = False
        self._forked = False
        self._used = False
        self._factory = channel_factory or self._make_channel

    def _channel_options(self, streaming_reads: bool) -> list[tuple[str, Any]]:
        merged = dict(_BASE_OPTIONS)
        if streaming_reads:
            merged[grpc.experimental.ChannelOptions.SingleThreadedUnaryStream] = 1
        tls = self._options.tls
        if tls is not None and tls.server_name:
            merged["grpc.ssl_target_name_override"] = tls.server_name
            merged["grpc.default_authority"] = tls.server_name
        merged.update(dict(self._options.grpc_options))
        # grpcio enables single-threaded reads by the option's mere presence; a falsy
        # value in grpc_options is taken as "off" and removes it.
        single = grpc.experimental.ChannelOptions.SingleThreadedUnaryStream
        if single in merged and not merged[single]:
            del merged[single]
        return list(merged.items())

    def _make_channel(self, address: str, channel_options: list[tuple[str, Any]]) -> grpc.Channel:
        tls = self._options.tls
        if tls is None:
            return grpc.insecure_channel(address, options=channel_options)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=tls.ca_cert,  # type: ignore[arg-type]
            private_key=tls.client_key,  # type: ignore[arg-type]
            certificate_chain=tls.client_cert,  # type: ignore[arg-type]
        )
        return grpc.secure_channel(address, credentials, options=channel_options)

    def stub(self, address: str, *, streaming_reads: bool = False) -> Stub:
        """The stub for ``address``, creating its channel on first use.

        Args:
            address: ``host:port`` of a broker.
            streaming_reads: The channel for ``Subscribe`` (single-threaded reads).

        Raises:
            ClientClosedError: after :meth:`close`.
        """
        if self._forked:
            raise ForkedClientError(
                "this object was created before the process forked and uses the parent's "
                "connections; the Client itself reconnects in the child: call it again"
            )
        key = (address, streaming_reads)
        entry = self._stubs.get(key)
        if entry is not None:
            return entry[1]
        with self._lock:
            if self._closed:
                raise ClientClosedError("client is closed")
            entry = self._stubs.get(key)
            if entry is None:
                channel = self._factory(address, self._channel_options(streaming_reads))
                entry = (channel, Stub(channel))  # type: ignore[no-untyped-call]
                self._stubs[key] = entry
                self._used = True
            return entry[1]

    @property
    def connected(self) -> bool:
        """Whether any channel was ever created."""
        return self._used

    def abandon_after_fork(self) -> None:
        """In a forked child: refuse further use, leaving the parent's channels alone.

        Takes no lock (a parent thread may have held it at fork time) and closes nothing
        (the channels belong to the parent's gRPC runtime).
        """
        self._forked = True

    def close(self) -> None:
        """Close every channel; idempotent."""
        with self._lock:
            self._closed = True
            entries = list(self._stubs.values())
            self._stubs.clear()
        for channel, _ in entries:
            channel.close()
