"""The Django app configuration of ``liftbridge_sync.django``."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks

from liftbridge_sync.django.checks import check_settings


class LiftbridgeConfig(AppConfig):
    """Registers the ``LIFTBRIDGE`` settings checks (tag ``liftbridge``).

    Thread-safe: Django calls :meth:`ready` once, at start-up.
    """

    name = "liftbridge_sync.django"
    label = "liftbridge_sync"
    verbose_name = "Liftbridge"

    def ready(self) -> None:
        """Register the system checks."""
        checks.register(check_settings, "liftbridge")
