"""Flask integration (extra ``flask``): one Liftbridge client per worker process.

Example::

    from flask import Flask
    from liftbridge_sync.flask import Liftbridge

    app = Flask(__name__)
    app.config["LIFTBRIDGE_ADDRESSES"] = "localhost:9292"
    liftbridge = Liftbridge(app)

    @app.post("/orders")
    def create_order():
        ack = liftbridge.client.publish("orders", request.get_data())
        return {"offset": ack.offset}

Settings are ``LIFTBRIDGE_<NAME>`` keys of ``app.config`` with the names of
:mod:`liftbridge_sync.settings` (``LIFTBRIDGE_ADDRESSES``, ``LIFTBRIDGE_TLS``,
``LIFTBRIDGE_RPC_TIMEOUT``, ...). They are checked by :meth:`Liftbridge.init_app`.

The client is :meth:`Client.for_process <liftbridge_sync.Client.for_process>`: created
lazily on first use in each process, never carried across a fork (a pre-forking server's
master may use it before forking its workers), and flushed and closed when the process
exits, not after each request.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from flask import Flask, Response, current_app, has_app_context, jsonify

import liftbridge_sync
from liftbridge_sync import (
    ArgumentTypeError,
    BrokerUnavailableError,
    ClientClosedError,
    ClientOptions,
    ConfigurationError,
)
from liftbridge_sync._durations import check_seconds
from liftbridge_sync.settings import options_from_settings

if TYPE_CHECKING:  # the app's start (create_app, flask CLI commands) loads no grpc
    from liftbridge_sync import Client

__all__ = ["EXTENSION_KEY", "Liftbridge", "get_client", "options_from_config"]

#: Key of the extension in ``app.extensions``.
EXTENSION_KEY = "liftbridge"
_PREFIX = "LIFTBRIDGE_"


def options_from_config(config: dict[str, object]) -> ClientOptions:
    """Client options from the ``LIFTBRIDGE_*`` keys of a Flask config.

    Raises:
        ConfigurationError: naming the bad ``LIFTBRIDGE_*`` key.

    Thread-safe: a pure function.
    """
    # Flask's config is a dict: other code may put keys that are not str in it.
    settings = {
        key[len(_PREFIX) :]: value
        for key, value in config.items()
        if isinstance(key, str) and key.startswith(_PREFIX)
    }
    return options_from_settings(settings, label=lambda name: _PREFIX + name)


class Liftbridge:
    """The Flask extension: ``Liftbridge(app)`` or ``Liftbridge()`` then ``init_app(app)``.

    Thread-safe: :attr:`client` may be used from every request thread; each process
    gets its own client.
    """

    def __init__(self, app: Flask | None = None) -> None:
        #: Numbers the readiness views made without an endpoint (atomic ``next``).
        self._views = itertools.count(1)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Check ``app.config`` and register the extension in ``app.extensions``.

        Raises:
            ConfigurationError: if a ``LIFTBRIDGE_*`` setting is missing or invalid.
        """
        app.extensions[EXTENSION_KEY] = options_from_config(app.config)

    @property
    def client(self) -> Client:
        """The client of the current app in this process (needs an app context; see
        :func:`get_client`)."""
        return get_client()

    def readiness_view(
        self, timeout: float = 2.0, *, endpoint: str | None = None
    ) -> Callable[[], tuple[Response, int]]:
        """A view answering whether the Liftbridge cluster is reachable now.

        Register it where your orchestrator probes readiness::

            app.add_url_rule("/ready", view_func=liftbridge.readiness_view())

        The view's name, Flask's endpoint when ``add_url_rule`` is given none, is
        ``endpoint``; without it, ``liftbridge_readiness`` for the first view this
        extension makes, then ``liftbridge_readiness_2``, ``_3``...: several views (two
        paths, two timeouts) register without an ``endpoint=``.

        It answers ``200 {"status": "ok", "broker": ..., "latency_ms": ...}`` when a
        broker answered within ``timeout`` seconds, else ``503 {"status":
        "unavailable", "reason": ...}`` (also when the client was closed under the
        probe: the cluster was not asked). Bad settings are not hidden behind a 503:
        they raise as in any view.

        Raises:
            ConfigurationError: ``timeout`` is not a finite number of seconds > 0 (here,
                not at every probe), or ``endpoint`` is an empty str (an
                ``ArgumentTypeError`` if it is no str).

        Thread-safe: the view may run on every request thread.
        """
        seconds = check_seconds("timeout", timeout, allow_zero=False, unlimited=False)
        assert seconds is not None  # unlimited=False: None and inf were refused
        if endpoint is not None and not isinstance(endpoint, str):
            raise ArgumentTypeError(f"'endpoint' must be a str or None, got {endpoint!r}")
        if endpoint == "":
            raise ConfigurationError("'endpoint' must be a non-empty str or None")
        if endpoint is None:
            number = next(self._views)
            endpoint = "liftbridge_readiness" if number == 1 else f"liftbridge_readiness_{number}"

        def liftbridge_readiness() -> tuple[Response, int]:
            try:
                health = get_client().check_health(seconds)
            except BrokerUnavailableError as exc:
                return jsonify(status="unavailable", reason=str(exc)), 503
            except ClientClosedError as exc:
                # Closed by another thread under the probe (the process exiting): no
                # bug of the view, and the cluster was not asked.
                return jsonify(status="unavailable", reason=f"client closed: {exc}"), 503
            return (
                jsonify(
                    status="ok",
                    broker=health.answered_by,
                    brokers=len(health.brokers),
                    latency_ms=round(health.latency * 1000, 3),
                ),
                200,
            )

        liftbridge_readiness.__name__ = liftbridge_readiness.__qualname__ = endpoint
        return liftbridge_readiness


def get_client(app: Flask | None = None) -> Client:
    """The per-process client of ``app`` (default: the current app, which needs an app
    context: a request, a CLI command, or ``with app.app_context():``).

    Raises:
        ConfigurationError: if the app was not set up with :class:`Liftbridge`, or no
            ``app`` is given outside an app context (Flask's own error there is a bare
            ``RuntimeError``).
        ArgumentTypeError: ``app`` is not a Flask app.

    Thread-safe: see :meth:`liftbridge_sync.Client.for_process`.
    """
    if app is None:
        if not has_app_context():
            raise ConfigurationError(
                "liftbridge_sync.flask.get_client() needs an app context (a request, or "
                "`with app.app_context():`) or the app: get_client(app)"
            )
        target: Flask = current_app
    elif isinstance(app, Flask):
        target = app
    else:
        raise ArgumentTypeError(f"'app' must be a Flask app or None, got {type(app).__name__}")
    options = target.extensions.get(EXTENSION_KEY)
    if not isinstance(options, ClientOptions):
        raise ConfigurationError("Liftbridge(app) or init_app(app) was not called for this app")
    # liftbridge_sync.Client loads the client's modules on the first call only.
    return liftbridge_sync.Client.for_process(options)
