"""liftbridge-sync: a thread-safe, synchronous Python client for Liftbridge."""

from __future__ import annotations

import logging

from liftbridge_sync._publishing.stats import PublisherStats
from liftbridge_sync._wire import speedups as _speedups_wire
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
    WrongThreadError,
)
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
    return _speedups_wire.ACTIVE


def _show_public_module() -> None:
    # Names defined in internal modules (client, subscription.partition, ...) say
    # ``liftbridge_sync.Client`` in reprs, docs and tracebacks, as httpx does. Pickling
    # still works: the class is reachable under that name.
    public = {"liftbridge_sync.errors", "liftbridge_sync.models", "liftbridge_sync.options"}
    public |= {"liftbridge_sync.positions", "liftbridge_sync.partitioners"}
    public |= {"liftbridge_sync.activity", "liftbridge_sync.health", "liftbridge_sync.stats"}
    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type) and obj.__module__ not in public:
            obj.__module__ = __name__


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
    "WrongThreadError",
    "__version__",
    "speedups_active",
]

_show_public_module()
