"""System checks (``manage.py check``): the ``LIFTBRIDGE`` setting, and the health checks
of the URLconf."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.core.checks import CheckMessage, Error
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.module_loading import import_string

from liftbridge_sync import ConfigurationError
from liftbridge_sync.django.client import client_options

__all__ = ["check_health_checks", "check_settings"]


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``liftbridge_sync.E001`` if ``settings.LIFTBRIDGE`` cannot build a client.

    Offline: it checks the settings, it does not contact a broker.

    Thread-safe: reads settings only.
    """
    try:
        client_options()
    except ConfigurationError as exc:
        return [
            Error(
                str(exc),
                hint="LIFTBRIDGE = {'ADDRESSES': 'host:9292', ...}; see liftbridge_sync.settings",
                id="liftbridge_sync.E001",
            )
        ]
    return []


def check_health_checks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``liftbridge_sync.E002`` for each :class:`~liftbridge_sync.django.health.Liftbridge`
    check of a django-health-check ``HealthCheckView`` in the URLconf that cannot be
    made (a bad ``timeout``, an option it does not take); the message starts with the
    view's route.

    Nothing without django-health-check, and nothing for a URLconf that does not load
    (Django's own checks report that). Offline: no broker is contacted.

    Thread-safe: reads the URLconf only.
    """
    try:
        from health_check.views import HealthCheckView

        from liftbridge_sync.django.health import Liftbridge
    except ImportError:  # the extra django-health is not installed
        return []
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # reported by Django's urls checks
        return []
    errors: list[CheckMessage] = []
    for route, view in _views(patterns, ""):
        view_class = getattr(view, "view_class", None)
        if not (isinstance(view_class, type) and issubclass(view_class, HealthCheckView)):
            continue
        initkwargs: dict[str, Any] = getattr(view, "view_initkwargs", None) or {}
        entries: Iterable[Any] = initkwargs.get("checks", getattr(view_class, "checks", ()))
        for check, options in _checks(entries):
            if not (isinstance(check, type) and issubclass(check, Liftbridge)):
                continue
            try:
                if not isinstance(options, Mapping):
                    # The view calls check(**options): anything else fails every probe.
                    raise ConfigurationError(
                        f"the options of {check.__name__} must be a mapping such as a "
                        f"dict, not a {type(options).__name__}"
                    )
                check(**options)
            except (ConfigurationError, TypeError) as exc:
                # TypeError: an option it does not take (a misspelt "timout"), which
                # would otherwise end manage.py check and runserver with a traceback.
                errors.append(
                    Error(
                        f"{route}: {exc}",
                        hint='e.g. ("liftbridge_sync.django.health.Liftbridge", '
                        '{"timeout": datetime.timedelta(seconds=2)})',
                        id="liftbridge_sync.E002",
                    )
                )
    return errors


def _views(patterns: Iterable[Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """Every view of the URLconf with its route."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            try:
                included = pattern.url_patterns
            except Exception:  # an include that does not load: Django's checks say so
                continue
            yield from _views(included, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.callback


def _checks(entries: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    """The checks of a ``HealthCheckView`` and their options, read as it reads them."""
    for entry in entries:
        try:
            check, options = entry
        except (ValueError, TypeError):
            check, options = entry, {}
        if isinstance(check, str):
            try:
                check = import_string(check)
            except ImportError:  # the view reports it
                continue
        yield check, options
