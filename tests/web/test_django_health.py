"""liftbridge_sync.django.health: a bad ``timeout`` is refused when the check is made and
reported by ``manage.py check``, not hidden as a health check's "unknown error"."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pytest

from liftbridge_sync import ArgumentTypeError, ConfigurationError
from liftbridge_sync.django.health import Liftbridge


@pytest.mark.parametrize(
    "timeout",
    [
        datetime.timedelta(0),
        datetime.timedelta(seconds=-1),
        datetime.timedelta(days=30),  # beyond any timer
    ],
)
def test_a_bad_timeout_is_refused_when_the_check_is_made(timeout: datetime.timedelta) -> None:
    with pytest.raises(ConfigurationError, match="Liftbridge.*'timeout'"):
        Liftbridge(timeout=timeout)


@pytest.mark.parametrize("timeout", [5, 2.5, "5", None])
def test_a_timeout_that_is_no_timedelta_is_refused_when_the_check_is_made(
    timeout: object,
) -> None:
    # Each failed in django-health-check's own code at every probe (timeout.total_seconds).
    with pytest.raises(ArgumentTypeError, match="'timeout' must be a datetime.timedelta"):
        Liftbridge(timeout=timeout)  # type: ignore[arg-type]


def test_a_good_timeout_is_kept() -> None:
    assert Liftbridge().timeout == datetime.timedelta(seconds=5)
    assert Liftbridge(timeout=datetime.timedelta(seconds=2)).timeout.total_seconds() == 2


CHECK_SCRIPT = """
import datetime, json, sys, types
from types import MappingProxyType
import django
from django.conf import settings
from django.urls import include, path
from health_check.views import HealthCheckView

urls = types.ModuleType("health_urls")
urls.urlpatterns = [
    path("good/", HealthCheckView.as_view(checks=[
        "liftbridge_sync.django.health.Liftbridge",
        ("liftbridge_sync.django.health.Liftbridge", {"timeout": datetime.timedelta(seconds=1)}),
    ])),
    path("ht/", include([path("bad/", HealthCheckView.as_view(checks=[
        ("liftbridge_sync.django.health.Liftbridge", {"timeout": datetime.timedelta(0)}),
    ]))])),
    path("typo/", HealthCheckView.as_view(checks=[
        ("liftbridge_sync.django.health.Liftbridge", {"timeout": 3}),
    ])),
    path("pairs/", HealthCheckView.as_view(checks=[
        ("liftbridge_sync.django.health.Liftbridge", [("timeout", 2)]),
    ])),
    path("mapped/", HealthCheckView.as_view(checks=[
        ("liftbridge_sync.django.health.Liftbridge", MappingProxyType({"timeout": 3})),
    ])),
    path("misspelt/", HealthCheckView.as_view(checks=[
        ("liftbridge_sync.django.health.Liftbridge", {"timout": datetime.timedelta(seconds=1)}),
    ])),
]
sys.modules["health_urls"] = urls
settings.configure(
    INSTALLED_APPS=["liftbridge_sync.django", "health_check"],
    LIFTBRIDGE={"ADDRESSES": "127.0.0.1:1"},
    ROOT_URLCONF="health_urls",
    ALLOWED_HOSTS=["*"],
)
django.setup()
from django.core.checks import run_checks
from django.test import Client

found = [{"id": m.id, "msg": m.msg} for m in run_checks(tags=["liftbridge"])]
try:
    Client(raise_request_exception=True).get("/ht/bad/", {"format": "json"})
    probe = "no error"
except Exception as exc:
    probe = type(exc).__name__ + ": " + str(exc)
print(json.dumps({"checks": found, "probe": probe}))
"""


def test_manage_py_check_reports_a_bad_health_check_timeout() -> None:
    # Offline: no broker listens on port 1, and none is asked.
    done = subprocess.run(
        [sys.executable, "-c", CHECK_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    checks = sorted(found["checks"], key=lambda m: m["msg"])
    assert [m["id"] for m in checks] == ["liftbridge_sync.E002"] * 5, found
    assert checks[0]["msg"].startswith("ht/bad/: ") and "'timeout'" in checks[0]["msg"]
    # A mapping that is not a dict is read as the view reads it: its timeout is checked.
    assert checks[1]["msg"].startswith("mapped/: ") and "datetime.timedelta" in checks[1]["msg"]
    # A misspelt option is reported, not a TypeError out of manage.py check.
    assert checks[2]["msg"].startswith("misspelt/: ") and "'timout'" in checks[2]["msg"]
    # Options the view cannot pass as keywords fail every probe: reported too.
    assert checks[3]["msg"].startswith("pairs/: ") and "must be a mapping" in checks[3]["msg"]
    assert checks[4]["msg"].startswith("typo/: ") and "datetime.timedelta" in checks[4]["msg"]
    # A probe of the misconfigured view raises the typed error, not "unknown error".
    assert found["probe"].startswith("ConfigurationError: "), found
    assert "'timeout'" in found["probe"]


CLOSED_SCRIPT = """
import asyncio, json, logging
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["liftbridge_sync.django", "health_check"],
    LIFTBRIDGE={"ADDRESSES": "127.0.0.1:1"},
)
django.setup()
logging.disable(logging.CRITICAL)  # the check's own log: not what is looked at here
import liftbridge_sync.django.health as health

handed = health.get_client


def closed_under_the_check():
    # Another thread closed it after it was handed out (a settings change replacing
    # it, or the process exiting).
    client = handed()
    client.close()
    return client


health.get_client = closed_under_the_check
result = asyncio.run(health.Liftbridge().get_result())
print(json.dumps({"type": type(result.error).__name__, "error": str(result.error)}))
"""


def test_a_client_closed_under_the_check_is_reported_as_such() -> None:
    # The ClientClosedError went to django-health-check as an unexpected exception:
    # "unknown error", with a traceback logged as a bug.
    done = subprocess.run(
        [sys.executable, "-c", CLOSED_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["type"] == "ServiceUnavailable", found
    assert "Liftbridge client closed" in found["error"], found
