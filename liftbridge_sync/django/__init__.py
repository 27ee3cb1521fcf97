"""Django integration (extra ``django``): add ``"liftbridge_sync.django"`` to INSTALLED_APPS.

Settings are a ``LIFTBRIDGE`` dict with the names of :mod:`liftbridge_sync.settings`::

    LIFTBRIDGE = {"ADDRESSES": ["lb1:9292", "lb2:9292"], "ACK_TIMEOUT": 10}

``manage.py check`` reports bad settings (ids ``liftbridge_sync.E001``...).
:func:`get_client` gives the per-process client (the one Flask gets too), and
``manage.py liftbridge_tail STREAM`` prints a stream.
"""

from __future__ import annotations

from liftbridge_sync.django.client import client_options, get_client

__all__ = ["client_options", "get_client"]
