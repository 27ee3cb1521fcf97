"""liftbridge_sync.flask: configuration checks at init_app, and the client it hands out."""

from __future__ import annotations

import pytest
from flask import Flask, url_for

import liftbridge_sync.flask as liftbridge_flask
from liftbridge_sync import ArgumentTypeError, Client, ConfigurationError, RetryPolicy, TLSOptions
from liftbridge_sync.flask import EXTENSION_KEY, Liftbridge, get_client


def _app(**config: object) -> Flask:
    app = Flask("test")
    app.config.update(config)
    return app


def test_init_app_reads_the_config() -> None:
    app = _app(
        LIFTBRIDGE_ADDRESSES=["a:1", "b:2"],
        LIFTBRIDGE_RPC_TIMEOUT=3,
        LIFTBRIDGE_RETRY={"max_attempts": 2},
        LIFTBRIDGE_TLS={"server_name": "lb.example"},
    )
    Liftbridge().init_app(app)
    options = app.extensions[EXTENSION_KEY]
    assert options.addresses == ("a:1", "b:2") and options.rpc_timeout == 3
    assert options.retry == RetryPolicy(max_attempts=2)
    assert options.tls == TLSOptions(server_name="lb.example")


def test_keys_that_are_not_str_are_not_the_extensions() -> None:
    """Flask's config is a dict: a key such as 5 raised AttributeError at init_app."""
    app = _app(LIFTBRIDGE_ADDRESSES="a:1")
    app.config[5] = "other"  # type: ignore[index]
    Liftbridge().init_app(app)
    assert app.extensions[EXTENSION_KEY].addresses == ("a:1",)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "LIFTBRIDGE_ADDRESSES is required"),
        ({"LIFTBRIDGE_ADDRESSES": "nohost"}, "LIFTBRIDGE_ADDRESSES"),
        ({"LIFTBRIDGE_ADDRESSES": "h:1", "LIFTBRIDGE_RPC_TIMEOUT": -1}, "LIFTBRIDGE_RPC_TIMEOUT"),
        ({"LIFTBRIDGE_ADDRESSES": "h:1", "LIFTBRIDGE_ADRESSES": "x"}, "LIFTBRIDGE_ADRESSES"),
        ({"LIFTBRIDGE_ADDRESSES": "h:1", "LIFTBRIDGE_TLS": "yes"}, "LIFTBRIDGE_TLS must be a dict"),
        ({"LIFTBRIDGE_ADDRESSES": "h:1", "LIFTBRIDGE_RETRY": {"tries": 1}}, "unknown keys"),
    ],
)
def test_bad_config_fails_at_init_app(config: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Liftbridge(_app(**config))


def test_get_client_without_init_app() -> None:
    with _app().app_context(), pytest.raises(ConfigurationError, match="init_app"):
        get_client()


def test_get_client_outside_an_app_context_says_what_it_needs() -> None:
    # Flask's bare RuntimeError ("Working outside of application context") came out of
    # the library, from get_client() and the extension's client property alike.
    app = _app(LIFTBRIDGE_ADDRESSES="127.0.0.1:1")
    liftbridge = Liftbridge(app)
    for call in (get_client, lambda: liftbridge.client):
        with pytest.raises(ConfigurationError, match=r"app context.*get_client\(app\)"):
            call()
    with pytest.raises(ArgumentTypeError, match="Flask app"):
        get_client("app")  # type: ignore[arg-type]
    client = get_client(app)  # the app given: no context needed
    try:
        with app.app_context():
            assert get_client() is client is liftbridge.client
    finally:
        client.close()


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), "2", None, True])
def test_a_bad_readiness_timeout_fails_when_the_view_is_made(timeout: object) -> None:
    # Not at every probe: a typo would otherwise surface as a 500 from the endpoint an
    # orchestrator polls, and the app would never become ready.
    liftbridge = Liftbridge(_app(LIFTBRIDGE_ADDRESSES="127.0.0.1:1"))
    with pytest.raises(ConfigurationError, match="timeout"):
        liftbridge.readiness_view(timeout=timeout)  # type: ignore[arg-type]


@pytest.mark.integration
def test_one_client_per_process_across_requests(liftbridge_address: str) -> None:
    app = _app(LIFTBRIDGE_ADDRESSES=liftbridge_address)
    liftbridge = Liftbridge(app)
    seen: list[Client] = []

    @app.get("/")
    def index() -> dict[str, object]:
        seen.append(liftbridge.client)
        return {"brokers": len(liftbridge.client.fetch_metadata().brokers)}

    with app.test_client() as http:
        for _ in range(3):
            response = http.get("/")
            assert response.status_code == 200 and response.json == {"brokers": 1}
    assert len({id(c) for c in seen}) == 1 and not seen[0].closed
    assert get_client(app) is seen[0]
    seen[0].close()


@pytest.mark.integration
def test_readiness_view_answers_200_then_503(liftbridge_address: str) -> None:
    for address, status in ((liftbridge_address, 200), ("127.0.0.1:1", 503)):
        app = _app(LIFTBRIDGE_ADDRESSES=address)
        liftbridge = Liftbridge(app)
        app.add_url_rule("/ready", view_func=liftbridge.readiness_view(timeout=2.0))
        try:
            response = app.test_client().get("/ready")
            assert response.status_code == status, response.get_json()
            body = response.get_json()
            if status == 200:
                assert body["status"] == "ok" and body["broker"] == liftbridge_address
                assert body["brokers"] == 1 and body["latency_ms"] > 0
            else:
                assert body["status"] == "unavailable" and "127.0.0.1:1" in body["reason"]
        finally:
            with app.app_context():
                get_client().close()


def test_a_client_closed_under_the_readiness_probe_answers_503(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another thread closed the client after the view got it (the process exiting, the
    # app closing it): the ClientClosedError made a 500 with Flask's error page.
    app = _app(LIFTBRIDGE_ADDRESSES="127.0.0.1:1")
    liftbridge = Liftbridge(app)
    app.add_url_rule("/ready", view_func=liftbridge.readiness_view(timeout=1.0))
    handed = liftbridge_flask.get_client

    def closed_under_the_probe(app: Flask | None = None) -> Client:
        client = handed(app)
        client.close()
        return client

    monkeypatch.setattr(liftbridge_flask, "get_client", closed_under_the_probe)
    response = app.test_client().get("/ready")
    assert response.status_code == 503
    body = response.get_json()
    assert body["status"] == "unavailable"
    assert "client closed" in body["reason"], body


def test_two_readiness_views_register_without_an_endpoint() -> None:
    # Both were named liftbridge_readiness: Flask refused the second ("View function
    # mapping is overwriting an existing endpoint function").
    app = _app(LIFTBRIDGE_ADDRESSES="127.0.0.1:1")  # nothing listens: both answer 503
    liftbridge = Liftbridge(app)
    app.add_url_rule("/ready", view_func=liftbridge.readiness_view(timeout=1.0))
    app.add_url_rule("/live/ready", view_func=liftbridge.readiness_view(timeout=0.5))
    app.add_url_rule("/named", view_func=liftbridge.readiness_view(endpoint="lb_ready"))
    try:
        with app.test_request_context():
            assert url_for("liftbridge_readiness") == "/ready"  # the first keeps its name
            assert url_for("lb_ready") == "/named"
            assert {url_for(e) for e in app.view_functions if e != "static"} == {
                "/ready",
                "/live/ready",
                "/named",
            }
        http = app.test_client()
        for path in ("/ready", "/live/ready", "/named"):
            response = http.get(path)
            assert response.status_code == 503, (path, response.get_json())
            assert "127.0.0.1:1" in response.get_json()["reason"]
    finally:
        with app.app_context():
            get_client().close()


@pytest.mark.parametrize("endpoint", ["", 5, b"ready"])
def test_a_bad_readiness_endpoint_fails_when_the_view_is_made(endpoint: object) -> None:
    liftbridge = Liftbridge(_app(LIFTBRIDGE_ADDRESSES="127.0.0.1:1"))
    with pytest.raises(ConfigurationError, match="endpoint"):
        liftbridge.readiness_view(endpoint=endpoint)  # type: ignore[arg-type]
