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
healthy when a broker returns fresh metadata within the check's timeout. The timeout is
a ``datetime.timedelta``, as for django-health-check's own checks::

    ("liftbridge_sync.django.health.Liftbridge", {"timeout": datetime.timedelta(seconds=2)})

A bad one is refused when the check is made, and ``manage.py check`` reports it, as it
does an option the check does not take (a misspelt ``timout``): ``liftbridge_sync.E002``,
naming the URL, for every ``HealthCheckView`` of the URLconf.
"""

from __future__ import annotations

import dataclasses
import datetime

from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable

from liftbridge_sync._durations import check_seconds
from liftbridge_sync.django.client import get_client
from liftbridge_sync.errors import (
    ArgumentTypeError,
    BrokerUnavailableError,
    ClientClosedError,
    ConfigurationError,
)

__all__ = ["Liftbridge", "Misconfigured"]

_NAME = "liftbridge_sync.django.health.Liftbridge"


class Misconfigured(ServiceUnavailable):  # type: ignore[misc]  # untyped base
    """The check could not ask the cluster: ``settings.LIFTBRIDGE`` is missing or
    invalid (the message says what to fix). Shown as ``Misconfigured: ...``; still a
    ``ServiceUnavailable`` to what tells the checks' failures apart.

    Thread-safe: immutable once raised.
    """

    message_type = "Misconfigured"


@dataclasses.dataclass
class Liftbridge(HealthCheck):  # type: ignore[misc]  # untyped base
    """Healthy when a Liftbridge broker answers within ``timeout``.

    Raises:
        ConfigurationError: ``timeout`` is not more than 0 s nor at most about 24 days
            (an ``ArgumentTypeError`` when it is no ``datetime.timedelta``): when the
            check is made, not as an "unknown error" at every probe.

    Thread-safe: django-health-check runs it on an executor thread; the client is shared.
    """

    timeout: datetime.timedelta = dataclasses.field(
        default=datetime.timedelta(seconds=5), repr=False
    )

    def __post_init__(self) -> None:
        timeout: object = self.timeout
        if not isinstance(timeout, datetime.timedelta):
            raise ArgumentTypeError(
                f"{_NAME}: 'timeout' must be a datetime.timedelta, got {timeout!r}"
            )
        try:
            check_seconds("timeout", timeout.total_seconds(), allow_zero=False, unlimited=False)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{_NAME}: {exc} ({timeout!r})") from None

    def run(self) -> None:
        """Raise ``ServiceUnavailable`` (with the client's reason) if no broker answers,
        or if the client was closed under the check (another thread closed it: a
        settings change replacing it, the process exiting), which could then tell
        nothing of the cluster; the next check gets a new client. Raise
        :class:`Misconfigured` (a ``ServiceUnavailable``) with what is wrong when
        ``settings.LIFTBRIDGE`` is missing or invalid."""
        try:
            client = get_client()
        except ConfigurationError as exc:
            # settings.LIFTBRIDGE is missing or invalid: say what to fix, not the
            # "unknown error" django-health-check makes of an exception of no check.
            raise Misconfigured(f"Liftbridge misconfigured: {exc}") from exc
        try:
            client.check_health(self.timeout.total_seconds())
        except BrokerUnavailableError as exc:
            raise ServiceUnavailable(f"Liftbridge unreachable: {exc}") from exc
        except ClientClosedError as exc:
            # Not a bug of the check (django-health-check's "unknown error", logged with
            # a traceback): the state of the cluster is unknown for this probe.
            raise ServiceUnavailable(
                f"Liftbridge client closed during the check, cluster not asked: {exc}"
            ) from exc
