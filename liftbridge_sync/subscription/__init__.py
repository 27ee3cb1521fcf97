"""Subscriptions: blocking iterators over one partition, or every partition of a stream.

* :mod:`.partition`: :class:`Subscription`, one partition's gRPC stream read on the
  caller's thread, resubscribing from the last offset after failover.
* :mod:`.connection`: opening and reopening that stream (broker choice, retries, the
  handshake, a deletion told apart from a restart).
* :mod:`.read_failures`: what a read that failed or stayed silent means (resubscribe,
  end, or raise).
* :mod:`.stream`: :class:`StreamSubscription`, one ``liftbridge-subscribe-<stream>-<p>``
  thread per partition merged into one iterator.
* :mod:`.merging`: the reader threads and the bounded mailbox under it.
* :mod:`.stats`: :class:`SubscriptionStats`, what a subscription counted.
"""

from liftbridge_sync.subscription.partition import Subscription
from liftbridge_sync.subscription.stats import SubscriptionStats
from liftbridge_sync.subscription.stream import StreamSubscription

__all__ = ["StreamSubscription", "Subscription", "SubscriptionStats"]
