"""What a cluster's metadata says: its brokers, who leads a partition, and the waits
for a leader."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import grpc

from liftbridge_sync._proto import api_pb2
from liftbridge_sync.testing._rpc import fetch_metadata

if TYPE_CHECKING:
    from liftbridge_sync.testing._cluster.nodes import ClusterNode
    from liftbridge_sync.testing._tls import ServerTLS

__all__ = ["POLL_INTERVAL", "ClusterMetadata"]

#: How often the cluster's waits ask again.
POLL_INTERVAL = 0.1


class ClusterMetadata:
    """The metadata queries of :class:`~liftbridge_sync.testing.LiftbridgeCluster`,
    asked of its running nodes. Not thread-safe.
    """

    servers: list[ClusterNode]
    tls: ServerTLS | None

    def metadata(
        self, streams: list[str] | None = None, timeout: float = 10.0
    ) -> api_pb2.FetchMetadataResponse:
        """FetchMetadata from the first live node that answers.

        Args:
            streams: Stream names (default: all).
            timeout: Deadline per attempted node.

        Returns:
            The response.

        Raises:
            LookupError: If no node answered.
        """
        errors = []
        for node in self.servers:
            if not node.running:
                continue
            try:
                return fetch_metadata(
                    node.address, timeout=timeout, streams=streams or (), tls=self.tls
                )
            except grpc.RpcError as exc:
                errors.append(f"{node.address}: {exc.code()}")
            except TimeoutError as exc:
                errors.append(str(exc))
        raise LookupError(f"no live node answered FetchMetadata ({errors or 'none running'})")

    def index_of(self, server_id: str) -> int:
        """Return the index of the node with ``server_id``.

        Raises:
            LookupError: If no node has that id.
        """
        for node in self.servers:
            if node.server_id == server_id:
                return node.index
        raise LookupError(f"unknown server id {server_id!r}")

    def partition_leader(self, stream: str, partition: int = 0) -> int:
        """Return the index of the node leading ``stream``/``partition``.

        Raises:
            LookupError: If the stream, partition or a leader is not known.
        """
        response = self.metadata([stream])
        for meta in response.streamMetadata:
            if meta.name != stream:
                continue
            if partition not in meta.partitions:
                raise LookupError(f"stream {stream!r} has no partition {partition}")
            leader = meta.partitions[partition].leader
            if not leader:
                raise LookupError(f"{stream}/{partition} has no leader")
            return self.index_of(leader)
        raise LookupError(f"stream {stream!r} not found")

    def wait_for_partition_leader(
        self, stream: str, partition: int = 0, timeout: float = 10.0
    ) -> int:
        """Wait until ``stream``/``partition`` has a leader that is running.

        Returns:
            Its index.

        Raises:
            TimeoutError: If there is none in time.
        """
        return self.wait_for_new_leader(stream, partition, None, timeout)

    def wait_for_new_leader(
        self, stream: str, partition: int, old_index: int | None, timeout: float = 30.0
    ) -> int:
        """Wait until a running node other than ``old_index`` leads the partition.

        Args:
            stream: Stream name.
            partition: Partition number.
            old_index: Index of the previous leader (None: any running leader).
            timeout: Seconds.

        Returns:
            The new leader's index.

        Raises:
            TimeoutError: If no new leader appears in time.
        """
        deadline = time.monotonic() + timeout
        last: str = "no answer yet"
        while True:
            try:
                index = self.partition_leader(stream, partition)
                if index != old_index and self.servers[index].running:
                    return index
                last = f"leader is still node {index}"
            except LookupError as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no new leader for {stream}/{partition} within {timeout:.0f}s ({last})"
                )
            time.sleep(POLL_INTERVAL)
