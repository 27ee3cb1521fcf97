"""Settings of the example project: no database, one app that publishes."""

from __future__ import annotations

import os

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["liftbridge_sync.django", "health_check", "orders"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "liftbridge_demo.urls"
WSGI_APPLICATION = "liftbridge_demo.wsgi.application"
DATABASES: dict[str, object] = {}
USE_TZ = True

LIFTBRIDGE = {
    "ADDRESSES": os.environ.get("LIFTBRIDGE_ADDRESSES", "127.0.0.1:9292"),
    "ACK_TIMEOUT": float(os.environ.get("LIFTBRIDGE_ACK_TIMEOUT", "10")),
}

#: The stream the views publish to (created by wsgi.py at start-up).
EXAMPLE_STREAM = os.environ.get("EXAMPLE_STREAM", "django-example")
