"""liftbridge-sync: a thread-safe, synchronous Python client for Liftbridge.

The public names below load on first use (PEP 562): ``import liftbridge_sync`` costs the
errors and a logger, not grpc, protobuf and HTTP/2; :class:`Client` (``from
liftbridge_sync import Client`` or ``liftbridge_sync.Client``) loads what a client
needs, once, when it is first named.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

# Eager and cheap: the C extension is chosen here, as before, so that
# LIFTBRIDGE_SYNC_NO_SPEEDUPS is read when the package is imported; the fork and exit
# hooks of clients register here, as before, so that atexit runs an application's hook
# registered after this import before the hook that closes its clients; the errors are
# plain classes, and an ``except`` clause should not load the client.
from liftbridge_sync import _extension
from liftbridge_sync._runtime import fork as _fork  # noqa: F401 - its hooks register
from liftbridge_sync.errors import (
    AckTimeoutError,
    ActivityStreamDisabledError,
    ArgumentTypeError,
    BrokerUnavailableError,
    ClientClosedError,
    CommitError,
    ConfigurationError,
    ConsumerGroupError,
    ConsumerGroupNotFoundError,
    ConsumerIdInUseError,
    CoordinatorMismatchError,
    DeadlineExceededError,
    EnvelopeError,
    ForkedClientError,
    IncorrectOffsetError,
    InternalThreadError,
    InvalidArgumentError,
    LiftbridgeError,
    LocalResourceError,
    MessageTooLargeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotFoundError,
    NotGroupMemberError,
    NotLeaderError,
    PartitionPausedError,
    PermissionDeniedError,
    PublishError,
    PublishQueueFullError,
    PublishRejectedError,
    ReadonlyPartitionError,
    ServerError,
    StreamDeletedError,
    StreamExistsError,
    TLSError,
    UnobservedPublishFailuresError,
    UnsupportedError,
    WaitTimeoutError,
    WrongThreadError,
)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, __getattr__ below
    from liftbridge_sync._publishing.stats import PublisherStats
    from liftbridge_sync.activity import (
        ActivityEvent,
        ConsumerJoinedGroup,
        ConsumerLeftGroup,
        StreamCreated,
        StreamDeleted,
        StreamPaused,
        StreamReadonlySet,
        StreamResumed,
        UnknownActivity,
    )
    from liftbridge_sync.client import Client
    from liftbridge_sync.consumer import Consumer
    from liftbridge_sync.health import Health
    from liftbridge_sync.models import (
        Ack,
        AckPolicy,
        BrokerInfo,
        EventTimestamps,
        Message,
        Metadata,
        PartitionInfo,
        PartitionMetadata,
        StreamInfo,
    )
    from liftbridge_sync.options import ClientOptions, RetryPolicy, TLSOptions
    from liftbridge_sync.partitioners import ByKey, Partitioner, RoundRobin
    from liftbridge_sync.positions import StartAt, StopAt
    from liftbridge_sync.stats import ClientStats, PartitionLag
    from liftbridge_sync.subscription import Subscription
    from liftbridge_sync.subscription.activity import ActivityStream
    from liftbridge_sync.subscription.stats import SubscriptionStats
    from liftbridge_sync.subscription.stream import StreamSubscription

#: The module each lazily loaded public name comes from.
_LAZY: dict[str, str] = {
    name: module
    for module, names in {
        "liftbridge_sync._publishing.stats": ("PublisherStats",),
        "liftbridge_sync.activity": (
            "ActivityEvent",
            "ConsumerJoinedGroup",
            "ConsumerLeftGroup",
            "StreamCreated",
            "StreamDeleted",
            "StreamPaused",
            "StreamReadonlySet",
            "StreamResumed",
            "UnknownActivity",
        ),
        "liftbridge_sync.client": ("Client",),
        "liftbridge_sync.consumer": ("Consumer",),
        "liftbridge_sync.health": ("Health",),
        "liftbridge_sync.models": (
            "Ack",
            "AckPolicy",
            "BrokerInfo",
            "EventTimestamps",
            "Message",
            "Metadata",
            "PartitionInfo",
            "PartitionMetadata",
            "StreamInfo",
        ),
        "liftbridge_sync.options": ("ClientOptions", "RetryPolicy", "TLSOptions"),
        "liftbridge_sync.partitioners": ("ByKey", "Partitioner", "RoundRobin"),
        "liftbridge_sync.positions": ("StartAt", "StopAt"),
        "liftbridge_sync.stats": ("ClientStats", "PartitionLag"),
        "liftbridge_sync.subscription": ("Subscription",),
        "liftbridge_sync.subscription.activity": ("ActivityStream",),
        "liftbridge_sync.subscription.stats": ("SubscriptionStats",),
        "liftbridge_sync.subscription.stream": ("StreamSubscription",),
    }.items()
    for name in names
}

#: Modules whose classes say so in their ``__module__``; classes from the others say
#: ``liftbridge_sync`` (see :func:`__getattr__`).
_PUBLIC_MODULES = frozenset(
    {
        "liftbridge_sync.activity",
        "liftbridge_sync.errors",
        "liftbridge_sync.health",
        "liftbridge_sync.models",
        "liftbridge_sync.options",
        "liftbridge_sync.partitioners",
        "liftbridge_sync.positions",
        "liftbridge_sync.stats",
    }
)

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())


def speedups_active() -> bool:
    """Whether this process runs the C speedups of the publish path.

    ``False`` means the pure-Python fallback: same results, about half the publish
    throughput. That happens when the extension was not built (a source install on a
    machine without a C compiler: ``pip`` only says so under ``-v``) or when
    ``LIFTBRIDGE_SYNC_NO_SPEEDUPS`` is set (not ``""``/``"0"``) at import time.
    ``liftbridge-sync --version`` prints the same answer with the reason, and the
    first :class:`Client` of a process that fell back logs it at DEBUG on the
    ``liftbridge_sync.speedups`` logger.

    Returns:
        ``True`` when the compiled ``liftbridge_sync._speedups`` extension is in use.

    Thread-safe: the answer is fixed when the package is imported.
    """
    return _extension.MODULE is not None


def __getattr__(name: str) -> Any:
    """Load a public name on first use (PEP 562) and keep it as a plain attribute.

    A class defined in an internal module (``client``, ``subscription.partition``,
    ...) says ``liftbridge_sync.Client`` in reprs, docs and tracebacks, as httpx does;
    pickling still works: the class is reachable under that name.

    Thread-safe: the import system serialises loading a module; two threads that race
    here store the same object.
    """
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    obj = getattr(importlib.import_module(module_name), name)
    if isinstance(obj, type) and obj.__module__ not in _PUBLIC_MODULES:
        obj.__module__ = __name__
    globals()[name] = obj
    return obj


def __dir__() -> list[str]:
    """The module's attributes, the public names not loaded yet included."""
    return sorted({*globals(), *__all__})


__all__ = [
    "Ack",
    "AckPolicy",
    "AckTimeoutError",
    "ActivityEvent",
    "ActivityStream",
    "ActivityStreamDisabledError",
    "ArgumentTypeError",
    "BrokerInfo",
    "BrokerUnavailableError",
    "ByKey",
    "Client",
    "ClientClosedError",
    "ClientOptions",
    "ClientStats",
    "CommitError",
    "ConfigurationError",
    "Consumer",
    "ConsumerGroupError",
    "ConsumerGroupNotFoundError",
    "ConsumerIdInUseError",
    "ConsumerJoinedGroup",
    "ConsumerLeftGroup",
    "CoordinatorMismatchError",
    "DeadlineExceededError",
    "EnvelopeError",
    "EventTimestamps",
    "ForkedClientError",
    "Health",
    "IncorrectOffsetError",
    "InternalThreadError",
    "InvalidArgumentError",
    "LiftbridgeError",
    "LocalResourceError",
    "Message",
    "MessageTooLargeError",
    "Metadata",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "NotFoundError",
    "NotGroupMemberError",
    "NotLeaderError",
    "PartitionInfo",
    "PartitionLag",
    "PartitionMetadata",
    "PartitionPausedError",
    "Partitioner",
    "PermissionDeniedError",
    "PublishError",
    "PublishQueueFullError",
    "PublishRejectedError",
    "PublisherStats",
    "ReadonlyPartitionError",
    "RetryPolicy",
    "RoundRobin",
    "ServerError",
    "StartAt",
    "StopAt",
    "StreamCreated",
    "StreamDeleted",
    "StreamDeletedError",
    "StreamExistsError",
    "StreamInfo",
    "StreamPaused",
    "StreamReadonlySet",
    "StreamResumed",
    "StreamSubscription",
    "Subscription",
    "SubscriptionStats",
    "TLSError",
    "TLSOptions",
    "UnknownActivity",
    "UnobservedPublishFailuresError",
    "UnsupportedError",
    "WaitTimeoutError",
    "WrongThreadError",
    "__version__",
    "speedups_active",
]
