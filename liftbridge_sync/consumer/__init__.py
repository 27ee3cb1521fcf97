"""Consumer groups (Liftbridge v1.8+, beta), compatible with go-liftbridge's consumer.

* :mod:`.group`: :class:`Consumer`, a group member that reads its assigned partitions
  as one iterator and commits positions as cursors under ``__group:<group>``.
* :mod:`._settings`: the consumer's arguments, checked.
* :mod:`._membership`: joining, the heartbeat's calls, coordinator failover, leaving.
* :mod:`._heartbeat`: the heartbeat loop: each poll, and what its answer or failure
  leads to.
* :mod:`._joining`: the join call and the races around it (an answer lost, the group
  created or removed under it, the id in use).
* :mod:`._coordinator`: finding the coordinator's address, asking who it is after a
  failover, reporting one that cannot be reached.
* :mod:`._standing`: what each polled answer does: the assignment applied, a member
  the server dropped joining again or failing.
* :mod:`._readers`: a reader thread per assigned partition, kept in line with the
  group's assignment.
* :mod:`._commits`: the delivered, processed and committed positions; the commits.
* :mod:`._autocommit`: the automatic commits and the thread making them.
* :mod:`._threads`: the heartbeat and commit threads, and how close() ends them.
* :mod:`._closing`: the steps of close(): stop reading, commit, leave, join threads.
* :mod:`._dropped`: where a consumer dropped without close() waits to be closed.
* :mod:`._mailbox`: the partition readers' records and the queue between them and the
  iterator.
* :mod:`._stats`: the counters behind :meth:`Consumer.stats`.
"""

from liftbridge_sync.consumer._stats import ConsumerStats
from liftbridge_sync.consumer.group import Consumer, group_cursor_id

__all__ = ["Consumer", "ConsumerStats", "group_cursor_id"]
