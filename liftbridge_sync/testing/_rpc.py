"""Raw gRPC calls used by the harness (independent of the Client class)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import grpc

from liftbridge_sync._proto import api_pb2, api_pb2_grpc

if TYPE_CHECKING:
    from liftbridge_sync.testing._tls import ServerTLS

__all__ = ["create_stream", "fetch_metadata", "stub"]

_CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]


def _channel(address: str, tls: ServerTLS | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
    client_cert = tls.client_cert.read_bytes() if tls.client_cert is not None else None
    client_key = tls.client_key.read_bytes() if tls.client_key is not None else None
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca.read_bytes(),
        private_key=client_key,
        certificate_chain=client_cert,
    )
    options: list[tuple[str, Any]] = list(_CHANNEL_OPTIONS)
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return grpc.secure_channel(address, credentials, options=options)


@contextlib.contextmanager
def stub(address: str, tls: ServerTLS | None = None) -> Iterator[api_pb2_grpc.APIStub]:
    """Yield an API stub on a fresh channel, closed afterwards.

    Args:
        address: ``host:port`` of a broker.
        tls: Speak TLS with these settings (the probe's client certificate under
            mutual TLS); ``None`` for plaintext.

    Yields:
        The stub.
    """
    channel = _channel(address, tls)
    try:
        yield api_pb2_grpc.APIStub(channel)  # type: ignore[no-untyped-call]
    finally:
        channel.close()


def fetch_metadata(
    address: str,
    timeout: float = 10.0,
    streams: Iterable[str] = (),
    *,
    tls: ServerTLS | None = None,
) -> api_pb2.FetchMetadataResponse:
    """Call FetchMetadata on one broker.

    The call carries **no gRPC deadline**; ``timeout`` is enforced on the
    client side only. A deadline would make the server wait for every peer in
    the Raft configuration until that deadline, so with one node down every
    deadline-bound FetchMetadata fails with DEADLINE_EXCEEDED (v1.9.0 and the
    pinned commit). Without one, the server waits at most 3 s for peers and
    answers with the brokers that replied.

    Args:
        address: ``host:port`` of the broker.
        timeout: Seconds to wait for the answer (keep it above 3).
        streams: Stream names to ask for (default: all).
        tls: TLS settings of the server (``None``: plaintext).

    Returns:
        The response.

    Raises:
        grpc.RpcError: If the call fails.
        TimeoutError: If there is no answer within ``timeout``.
    """
    with stub(address, tls) as api:
        request = api_pb2.FetchMetadataRequest(streams=list(streams))
        future = api.FetchMetadata.future(request)
        try:
            return cast(api_pb2.FetchMetadataResponse, future.result(timeout=timeout))
        except grpc.FutureTimeoutError:
            future.cancel()
            raise TimeoutError(f"FetchMetadata on {address}: no answer in {timeout}s") from None


def create_stream(
    address: str,
    name: str,
    *,
    subject: str | None = None,
    partitions: int = 1,
    replication_factor: int = 1,
    timeout: float = 10.0,
    tls: ServerTLS | None = None,
) -> None:
    """Call CreateStream on one broker (the deadline doubles as a leader wait).

    Args:
        address: ``host:port`` of the broker.
        name: Stream name.
        subject: NATS subject (default: the name).
        partitions: Number of partitions.
        replication_factor: Replication factor (-1 = all brokers).
        timeout: gRPC deadline in seconds.
        tls: TLS settings of the server (``None``: plaintext).

    Raises:
        grpc.RpcError: If the call fails.
    """
    with stub(address, tls) as api:
        request = api_pb2.CreateStreamRequest(
            name=name,
            subject=subject or name,
            partitions=partitions,
            replicationFactor=replication_factor,
        )
        api.CreateStream(request, timeout=timeout)
