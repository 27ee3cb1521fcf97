"""A django-health-check (>= 4) check of the Liftbridge cluster (extra ``django-health``).

Add it to the health check view next to the others::

    from health_check.views import HealthCheckView

    urlpatterns = [
        path("ht/", HealthCheckView.as_view(checks=[
            "health_check.checks.Database",
            "liftbridge_sync.django.health.Liftbridge",
        ])),
    ]

The check uses the project's client (:func:`liftbridge_sync.django.get_client`) and
:meth:`Client.check_health <liftbridge_sync.Client.check_health>`: the cluster is
healthy when a broker returns fresh metadata within the check's timeout.
"""

from __future__ import annotations

import dataclasses
import datetime

from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable

from liftbridge_sync.django.client import get_client
from liftbridge_sync.errors import BrokerUnavailableError

__all__ = ["Liftbridge"]


@dataclasses.dataclass
class Liftbridge(HealthCheck):  # type: ignore[misc]  # untyped base
    """Healthy when a Liftbridge broker answers within ``timeout``.

    Thread-safe: django-health-check runs it on an executor thread; the client is shared.
    """

    timeout: datetime.timedelta = dataclasses.field(
        default=datetime.timedelta(seconds=5), repr=False
    )

    def run(self) -> None:
        """Raise ``ServiceUnavailable`` (with the client's reason) if no broker answers."""
        try:
            get_client().check_health(self.timeout.total_seconds())
        except BrokerUnavailableError as exc:
            raise ServiceUnavailable(f"Liftbridge unreachable: {exc}") from exc
