"""A Liftbridge server the harness did not start (``LIFTBRIDGE_ADDRESS``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Protocol

__all__ = ["ExternalLiftbridge", "LiftbridgeEndpoint"]


class LiftbridgeEndpoint(Protocol):
    """What every ``liftbridge_server`` fixture value offers."""

    @property
    def address(self) -> str:
        """``host:port`` of the gRPC API."""
        ...

    @property
    def nats_url(self) -> str | None:
        """URL of the server's NATS, when known."""
        ...


@dataclasses.dataclass(frozen=True)
class ExternalLiftbridge:
    """An already running server, e.g. started by CI or docker compose.

    Immutable, hence thread-safe.

    Attributes:
        address: ``host:port`` of the gRPC API.
        nats_url: URL of its NATS, or None when unknown.
    """

    address: str
    nats_url: str | None = None

    @property
    def host(self) -> str:
        """Host part of :attr:`address`."""
        return self.address.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        """Port part of :attr:`address`."""
        return int(self.address.rsplit(":", 1)[1])

    @classmethod
    def from_env(cls) -> ExternalLiftbridge | None:
        """Build from ``LIFTBRIDGE_ADDRESS`` and ``LIFTBRIDGE_NATS_URL``, if set."""
        address = os.environ.get("LIFTBRIDGE_ADDRESS", "").strip()
        if not address:
            return None
        return cls(address=address, nats_url=os.environ.get("LIFTBRIDGE_NATS_URL") or None)
