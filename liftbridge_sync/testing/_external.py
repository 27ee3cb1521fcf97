"""A Liftbridge server the harness did not start (``LIFTBRIDGE_ADDRESS``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Protocol

from liftbridge_sync.errors import ConfigurationError
from liftbridge_sync.options import parse_address

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

    Attributes:
        address: ``host:port`` of the gRPC API (``[v6]:port`` for an IPv6 host).
        nats_url: URL of its NATS, or None when unknown.

    Raises:
        ConfigurationError: ``address`` is not ``host:port`` (checked when built, with
            the client's own rules, rather than by the first test that reads the port).

    Immutable, hence thread-safe.
    """

    address: str
    nats_url: str | None = None

    def __post_init__(self) -> None:
        parse_address(self.address)

    @property
    def host(self) -> str:
        """Host part of :attr:`address` (an IPv6 host without its brackets)."""
        return parse_address(self.address)[0]

    @property
    def port(self) -> int:
        """Port part of :attr:`address`."""
        return parse_address(self.address)[1]

    @classmethod
    def from_env(cls) -> ExternalLiftbridge | None:
        """Build from ``LIFTBRIDGE_ADDRESS`` and ``LIFTBRIDGE_NATS_URL``, if set.

        A blank variable counts as unset.

        Raises:
            ConfigurationError: ``LIFTBRIDGE_ADDRESS`` is not ``host:port``.
        """
        address = os.environ.get("LIFTBRIDGE_ADDRESS", "").strip()
        if not address:
            return None
        nats_url = os.environ.get("LIFTBRIDGE_NATS_URL", "").strip() or None
        try:
            return cls(address=address, nats_url=nats_url)
        except ConfigurationError as exc:
            raise ConfigurationError(f"LIFTBRIDGE_ADDRESS: {exc}") from exc
