"""The Django app configuration of ``liftbridge_sync.django``."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks

from liftbridge_sync.django.checks import check_health_checks, check_settings


class LiftbridgeConfig(AppConfig):
    """Registers the system checks of the ``LIFTBRIDGE`` setting and of the URLconf's
    Liftbridge health checks (tag ``liftbridge``).

    Thread-safe: Django calls :meth:`ready` once, at start-up.
    """

    name = "liftbridge_sync.django"
    label = "liftbridge_sync"
    verbose_name = "Liftbridge"

    def ready(self) -> None:
        """Register the system checks."""
        checks.register(check_settings, "liftbridge")
        checks.register(check_health_checks, "liftbridge")
