"""Stream administration calls: a built request in, the server's answer handled.

The requests are built (and every argument checked) in :mod:`liftbridge_sync._wire.requests`
before anything here runs. Functions of the core they are given: thread-safe.
"""

from __future__ import annotations

from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.core import ClientCore
from liftbridge_sync._wire import rpcs
from liftbridge_sync._wire.status import CallContext, maybe_carried_out
from liftbridge_sync._wire.validate import CREATE_SECONDS_PER_PARTITION, check_bool
from liftbridge_sync.errors import (
    ConfigurationError,
    LiftbridgeError,
    NoSuchStreamError,
    StreamExistsError,
)

__all__ = ["create_stream", "delete_stream", "pause_stream", "set_stream_readonly"]


def create_stream(core: ClientCore, request: api_pb2.CreateStreamRequest, exist_ok: bool) -> bool:
    """Create the stream: ``True``, or ``False`` if it existed and ``exist_ok``.

    CreateStream is not idempotent and is retried on UNAVAILABLE: if an earlier attempt
    may have created the stream before its answer was lost, the
    :class:`StreamExistsError` of a later one says so.

    Raises:
        ConfigurationError: on a bad ``exist_ok``, before anything is sent.
        StreamExistsError: if the name is taken and not ``exist_ok``.
    """
    check_bool("exist_ok", exist_ok)
    if request.replicationFactor == -1 and request.HasField("minIsr"):
        _check_min_isr_fits(core, request.minIsr.value)
    failed: list[LiftbridgeError] = []
    try:
        core.call_any(
            rpcs.CREATE_STREAM,
            request,
            context=CallContext.CREATE_STREAM,
            failed=failed,
            # The server creates every partition before it answers.
            timeout=core.options.rpc_timeout + request.partitions * CREATE_SECONDS_PER_PARTITION,
        )
    except StreamExistsError as exc:
        if exist_ok:
            return False
        earlier = maybe_carried_out(failed)
        if earlier is None:
            raise
        raise StreamExistsError(
            f"{exc}; an earlier attempt of this call may have created it: it failed "
            f"with '{earlier}' after it may have reached a broker",
            code=exc.code,
            details=exc.details,
        ) from exc
    return True


def _check_min_isr_fits(core: ClientCore, min_isr: int) -> None:
    """Refuse a ``min_isr`` above the cluster's size for a stream on every server.

    With ``replication_factor=-1`` the server takes the cluster's size as the factor
    and does not compare ``min_isr`` with it (v1.9.0): the stream is created, and its
    messages are acknowledged with LEADER but never committed (nothing can read them)
    and time out with ALL.

    Raises:
        ConfigurationError: ``min_isr`` is above the number of servers.
    """
    servers = len(core.fetch_metadata().brokers)
    if servers and min_isr > servers:
        raise ConfigurationError(
            f"'min_isr' ({min_isr}) is above the cluster's {servers} server(s), which "
            "replication_factor=-1 replicates to: no message could ever be committed"
        )


def delete_stream(core: ClientCore, request: api_pb2.DeleteStreamRequest) -> None:
    """Delete the stream, then forget its cached metadata.

    DeleteStream is not idempotent and is retried on UNAVAILABLE: if an earlier attempt
    may have deleted the stream before its answer was lost, the
    :class:`NoSuchStreamError` of a later one says so.
    """
    failed: list[LiftbridgeError] = []
    try:
        core.call_any(rpcs.DELETE_STREAM, request, context=CallContext.DELETE_STREAM, failed=failed)
    except NoSuchStreamError as exc:
        earlier = maybe_carried_out(failed)
        if earlier is None:
            raise
        core.metadata.forget_stream(request.name)
        raise NoSuchStreamError(
            f"{exc}; an earlier attempt of this call may have deleted it: it failed "
            f"with '{earlier}' after it may have reached a broker",
            code=exc.code,
            details=exc.details,
        ) from exc
    core.metadata.forget_stream(request.name)


def pause_stream(core: ClientCore, request: api_pb2.PauseStreamRequest) -> None:
    """Pause the partitions the request names (all when it names none)."""
    core.call_any(rpcs.PAUSE_STREAM, request, context=CallContext.STREAM_ADMIN)


def set_stream_readonly(core: ClientCore, request: api_pb2.SetStreamReadonlyRequest) -> None:
    """Make the partitions the request names read-only, or writable again."""
    core.call_any(rpcs.SET_STREAM_READONLY, request, context=CallContext.STREAM_ADMIN)
