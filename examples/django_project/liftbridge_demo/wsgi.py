"""WSGI entry point. Creates the example stream once per process that loads it.

Under ``gunicorn --preload`` that is the master, which then forks the workers: each
worker's ``get_client()`` is a client of its own.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from liftbridge_sync.django import get_client

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "liftbridge_demo.settings")

application = get_wsgi_application()

get_client().create_stream(
    settings.EXAMPLE_STREAM, settings.EXAMPLE_STREAM, partitions=2, exist_ok=True
)
