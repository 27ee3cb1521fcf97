"""What a subscription has done so far: resubscribes, and messages refused for their
offset or their address."""

from __future__ import annotations

import dataclasses

__all__ = ["SubscriptionStats"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionStats:
    """Counters of a subscription since it opened (see ``Subscription.stats``).

    For a whole-stream subscription, the sums over its partitions. Immutable snapshot;
    safe to share.
    """

    #: Times the subscription reopened its call (after failover, a lost connection, a
    #: ``get`` timeout, a transient server refusal or an out-of-order message).
    resubscribes: int = 0
    #: Messages refused because their offset was at or below one already delivered (a
    #: diverged replica, a server bug): never handed out; each was logged with its payload
    #: size and the last delivered one's, and the subscription resubscribed after the
    #: last delivered offset.
    out_of_order: int = 0
    #: Messages refused because they named another stream or partition than the
    #: subscription's (a server or proxy bug): never handed out; each batch with one was
    #: logged, and the subscription resubscribed after the last delivered offset.
    misaddressed: int = 0
