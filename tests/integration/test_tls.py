"""TLS, mutual TLS and ACLs against real servers started with test-time certificates.

Each server is a fresh single node with embedded NATS, started by the harness from
certificates made in the module's temporary directory: a TLS-only server, a mutual-TLS
server and a mutual-TLS server with casbin ACLs (and one whose CA lacks keyUsage, for
strict X.509 verification). Failures must be typed, quick (well under the 5.8 s a
retried UNAVAILABLE takes) and must not print gRPC C-core lines. Both trust stores are
tried on every path: a CA only in the system store (a bundle in ``SSL_CERT_FILE``), only
in ``ca_cert``, and in neither.
"""

from __future__ import annotations

import logging
import ssl
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync import Client, StartAt, StopAt, TLSOptions
from liftbridge_sync._transport import channels
from liftbridge_sync._transport.tls import TLSSetup
from liftbridge_sync.testing import (
    PROBE_CLIENT,
    LiftbridgeCluster,
    LiftbridgeServer,
    ServerStartError,
    TestCertificates,
    generate_certificates,
    write_policy,
)

from .conftest import unique

pytestmark = pytest.mark.integration

#: A misconfiguration must fail well before one retried UNAVAILABLE would (5.8 s).
QUICK = 2.0
TRANSPORTS = ["grpc", "h2"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"), clients=["alice", "bob"])


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    """Certificates from another CA, which the servers do not trust (same CNs)."""
    return generate_certificates(
        tmp_path_factory.mktemp("foreign"), clients=["alice"], ca_name="some other CA"
    )


@pytest.fixture(scope="module")
def tls_server(certs: TestCertificates) -> Iterator[LiftbridgeServer]:
    with LiftbridgeServer(tls=certs.server_tls()) as server:
        yield server


@pytest.fixture(scope="module")
def mtls_server(certs: TestCertificates) -> Iterator[LiftbridgeServer]:
    with LiftbridgeServer(tls=certs.server_tls(mutual=True)) as server:
        yield server


ALLOWED = "acl-allowed"
FORBIDDEN = "acl-forbidden"


@pytest.fixture(scope="module")
def authz_server(certs: TestCertificates) -> Iterator[LiftbridgeServer]:
    # alice may do everything on ALLOWED and nothing on FORBIDDEN; bob may only read
    # metadata. SetCursor also publishes to __cursors with the caller's identity.
    alice_ops = [
        "CreateStream",
        "DeleteStream",
        "Publish",
        "Subscribe",
        "FetchPartitionMetadata",
        "SetCursor",
        "FetchCursor",
    ]
    rules = [(PROBE_CLIENT, "*", "FetchMetadata"), ("alice", "*", "FetchMetadata")]
    rules += [("alice", ALLOWED, op) for op in alice_ops]
    rules += [("alice", "__cursors", "Publish"), ("bob", "*", "FetchMetadata")]
    policy = write_policy(certs.directory / "policy.csv", rules)
    with LiftbridgeServer(tls=certs.server_tls(authz_policy=policy)) as server:
        yield server


def _client(server: LiftbridgeServer, tls: TLSOptions | None, **options: object) -> Client:
    return Client([server.address], tls=tls, **options)  # type: ignore[arg-type]


def _as(certs: TestCertificates, name: str) -> TLSOptions:
    cert, key = certs.client(name)
    return TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(key))


# ---------------------------------------------------------------- the harness


def test_harness_writes_the_tls_keys_and_the_authz_bug_workaround(
    authz_server: LiftbridgeServer,
) -> None:
    config = authz_server.config_path.read_text()
    for key in (
        '"tls.cert"',
        '"tls.key"',
        '"tls.client.auth.enabled": true',
        '"tls.client.auth.ca"',
        '"tls.client.authz.enabled": true',
        '"tls.client.authz.model"',
        '"tls.client.authz.policy"',
    ):
        assert key in config


def test_harness_fails_at_once_when_acls_deny_its_probe(
    certs: TestCertificates, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "policy.csv", [("alice", "*", "FetchMetadata")])
    server = LiftbridgeServer(tls=certs.server_tls(authz_policy=policy), startup_timeout=30)
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="FetchMetadata on '\\*'"):
        server.start()
    server.close()
    assert time.monotonic() - started < 15
    assert not server.running


# ---------------------------------------------------------------- what works


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_admin_publish_subscribe_and_cursors(
    request: pytest.FixtureRequest, certs: TestCertificates, mutual: bool, transport: str
) -> None:
    server: LiftbridgeServer = request.getfixturevalue("mtls_server" if mutual else "tls_server")
    tls = _as(certs, "alice") if mutual else TLSOptions(ca_cert=str(certs.ca_cert))
    name = unique("tls")
    with _client(server, tls, publish_transport=transport) as client:
        assert client.create_stream(name, name, partitions=2)
        assert name in client.fetch_metadata(name).streams
        assert client.fetch_partition_metadata(name, 1).leader
        acks = [client.publish(name, f"sync-{i}".encode(), partition=1) for i in range(5)]
        assert [ack.offset for ack in acks if ack is not None] == list(range(5))
        futures = [
            client.publish_async(name, f"async-{i}".encode(), partition=1) for i in range(45)
        ]
        client.flush()
        acks = [f.result() for f in futures]
        assert [a.offset for a in acks if a is not None] == list(range(5, 50))

        with client.subscribe(
            name, partition=1, start=StartAt.earliest(), stop=StopAt.latest()
        ) as sub:
            values = [msg.value for msg in sub]
        assert values == [f"sync-{i}".encode() for i in range(5)] + [
            f"async-{i}".encode() for i in range(45)
        ]

        client.set_cursor("reader", name, 1, 41)
        assert client.fetch_cursor("reader", name, 1) == 41
        with client.subscribe(name, partition=1, start=StartAt.cursor("reader")) as sub:
            assert sub.get(timeout=10).offset == 42

        client.delete_stream(name)
        assert name not in client.fetch_metadata().streams


def test_one_tls_preflight_per_broker(
    mtls_server: LiftbridgeServer, certs: TestCertificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = channels.preflight_tls

    def counting(address: str, *args: Any) -> bool:
        calls.append(address)
        return real(address, *args)

    monkeypatch.setattr(channels, "preflight_tls", counting)
    name = unique("tls")
    with _client(mtls_server, _as(certs, "alice")) as client:
        client.create_stream(name, name)
        client.publish(name, b"x")
        with client.subscribe(name, start=StartAt.earliest()) as sub:
            assert sub.get(timeout=10).value == b"x"
        client.delete_stream(name)
    assert calls == [mtls_server.address]


@pytest.mark.cluster
def test_mutual_tls_cluster_reaches_every_leader(
    certs: TestCertificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seeded with one node, the client learns the others from metadata and must reach
    # each partition leader over TLS with the same certificates, with either transport.
    checked: list[str] = []
    real = channels.preflight_tls

    def recording(address: str, *args: Any) -> bool:
        checked.append(address)
        return real(address, *args)

    monkeypatch.setattr(channels, "preflight_tls", recording)
    with LiftbridgeCluster(3, tls=certs.server_tls(mutual=True)) as cluster:
        for transport in TRANSPORTS:
            checked.clear()
            name = unique(f"tlscluster-{transport}")
            seed = cluster.addresses[:1]
            with Client(seed, tls=_as(certs, "alice"), publish_transport=transport) as client:
                client.create_stream(name, name, partitions=3, replication_factor=3)
                metadata = client.fetch_metadata(name)
                leaders = {
                    metadata.broker(info.leader).address  # type: ignore[union-attr]
                    for info in metadata.streams[name].partitions.values()
                }
                for partition in range(3):
                    value = f"{transport}-{partition}".encode()
                    ack = client.publish(name, value, partition=partition)
                    assert ack is not None and ack.partition == partition
                    with client.subscribe(
                        name, partition=partition, start=StartAt.earliest(), stop=StopAt.latest()
                    ) as sub:
                        assert [m.value for m in sub] == [value]
            assert leaders <= set(checked), (leaders, checked)
            assert len(checked) == len(set(checked)), "one pre-flight per broker"


# ---------------------------------------------------------------- what fails, and how


def _no_grpc_noise(err: str) -> None:
    noisy = [line for line in err.splitlines() if ".cc:" in line or "TSI_" in line]
    assert not noisy, f"gRPC C-core wrote to stderr: {noisy}"


Operation = Callable[[Client], object]


def _fetch_metadata(client: Client) -> object:
    return client.fetch_metadata()


def _create_stream(client: Client) -> object:
    name = unique("tlsfail")
    return client.create_stream(name, name)


def _publish(client: Client) -> object:
    return client.publish(unique("tlsfail"), b"x")


def _subscribe(client: Client) -> object:
    with client.subscribe(unique("tlsfail")) as sub:
        return sub.get(timeout=1)


#: Operation name to (operation, publish transport). Subscriptions use the default
#: ``"h2"`` subscribe transport; every path shares the client's one TLS set-up and its
#: pre-flight diagnosis.
OPERATIONS: dict[str, tuple[Operation, str]] = {
    "fetch_metadata": (_fetch_metadata, "grpc"),
    "create_stream": (_create_stream, "grpc"),
    "publish-grpc": (_publish, "grpc"),
    "publish-h2": (_publish, "h2"),
    "subscribe": (_subscribe, "grpc"),
}
OPERATION_PARAMS = [pytest.param(name) for name in OPERATIONS]


def _expect_tls_error(
    capfd: pytest.CaptureFixture[str],
    server: LiftbridgeServer | str,
    tls: TLSOptions | None,
    operation: str,
    reason: str,
    words: str,
) -> lb.TLSError:
    call, transport = OPERATIONS[operation]
    address = server if isinstance(server, str) else server.address
    client = Client([address], tls=tls, publish_transport=transport, ack_timeout=QUICK)
    capfd.readouterr()
    started = time.monotonic()
    with client, pytest.raises(lb.TLSError) as info:
        call(client)
    elapsed = time.monotonic() - started
    assert elapsed < QUICK, f"took {elapsed:.1f}s: {info.value}"
    assert info.value.reason == reason, str(info.value)
    assert not info.value.retryable
    assert isinstance(info.value, lb.BrokerUnavailableError)
    assert words.lower() in str(info.value).lower()
    _no_grpc_noise(capfd.readouterr().err)
    return info.value


@pytest.mark.parametrize("operation", OPERATION_PARAMS)
def test_missing_client_certificate(
    mtls_server: LiftbridgeServer,
    certs: TestCertificates,
    capfd: pytest.CaptureFixture[str],
    operation: str,
) -> None:
    tls = TLSOptions(ca_cert=str(certs.ca_cert))
    _expect_tls_error(
        capfd, mtls_server, tls, operation, "client_certificate_required", "client_cert"
    )


@pytest.mark.parametrize("operation", OPERATION_PARAMS)
def test_unknown_client_certificate(
    mtls_server: LiftbridgeServer,
    certs: TestCertificates,
    foreign: TestCertificates,
    capfd: pytest.CaptureFixture[str],
    operation: str,
) -> None:
    cert, key = foreign.client("alice")
    tls = TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(key))
    _expect_tls_error(
        capfd,
        mtls_server,
        tls,
        operation,
        "client_certificate_rejected",
        "rejected the client certificate",
    )


@pytest.mark.parametrize("operation", OPERATION_PARAMS)
def test_untrusted_server_certificate(
    tls_server: LiftbridgeServer,
    foreign: TestCertificates,
    capfd: pytest.CaptureFixture[str],
    operation: str,
) -> None:
    tls = TLSOptions(ca_cert=str(foreign.ca_cert))
    error = _expect_tls_error(
        capfd, tls_server, tls, operation, "server_certificate_untrusted", "ca_cert"
    )
    assert "issued by 'CN=liftbridge-sync test CA'" in str(error)  # which CA to look for


@pytest.mark.parametrize("operation", OPERATION_PARAMS)
def test_server_name_mismatch(
    tls_server: LiftbridgeServer,
    certs: TestCertificates,
    capfd: pytest.CaptureFixture[str],
    operation: str,
) -> None:
    tls = TLSOptions(ca_cert=str(certs.ca_cert), server_name="not-the-broker.example")
    _expect_tls_error(capfd, tls_server, tls, operation, "server_name_mismatch", "server_name")


GRPC_OPERATIONS = [n for n in OPERATIONS if n != "publish-h2"]


@pytest.mark.parametrize("operation", GRPC_OPERATIONS)
def test_plaintext_against_tls_is_a_retried_hint_when_unverified(
    tls_server: LiftbridgeServer, operation: str
) -> None:
    # gRPC reports only "Socket closed" at connect. The broker's port answers TLS with
    # a certificate of the test CA, which the system store does not hold: anything on
    # the path could answer so, so the failure is retried and names the likely cause,
    # never a final TLSError.
    call, transport = OPERATIONS[operation]
    quick = lb.RetryPolicy(max_attempts=2, max_delay=2.0)
    with Client(
        [tls_server.address], publish_transport=transport, retry=quick, ack_timeout=QUICK
    ) as client:
        with pytest.raises(lb.BrokerUnavailableError) as info:
            call(client)
    assert not isinstance(info.value, lb.TLSError)
    assert "answers a TLS handshake" in str(info.value), str(info.value)


@pytest.mark.parametrize("operation", GRPC_OPERATIONS)
def test_plaintext_against_a_verified_tls_broker_is_a_tls_error(
    tls_server: LiftbridgeServer,
    certs: TestCertificates,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    operation: str,
) -> None:
    # With the test CA in the system store the port's TLS answer verifies: plaintext
    # can never work there, and the error is final at once.
    _system_store(monkeypatch, tmp_path, certs.ca_cert)
    _expect_tls_error(capfd, tls_server, None, operation, "server_requires_tls", "requires TLS")


def test_plaintext_h2_publish_against_tls_is_retried_with_a_hint_when_unverified(
    tls_server: LiftbridgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The h2 publish stream learns "TLS-only broker" from a probe handshake. Its
    # certificate is from the test CA, which the system store does not hold: the
    # answer is unverified (anything on the path could give it), so the failure stays
    # retryable and only names the likely cause; the publish then times out.
    with Client([tls_server.address], publish_transport="h2", ack_timeout=QUICK) as client:
        with pytest.raises(lb.AckTimeoutError):
            client.publish(unique("tlsfail"), b"x")
    hints = [r.getMessage() for r in caplog.records if "answers a TLS handshake" in r.getMessage()]
    assert hints and all("reconnecting" in hint for hint in hints), hints


def test_plaintext_h2_publish_against_a_verified_tls_broker_is_a_tls_error(
    tls_server: LiftbridgeServer,
    certs: TestCertificates,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # With the test CA in the system store, the probe's handshake verifies: a broker
    # holding a trusted certificate for this address speaks TLS there, so plaintext can
    # never work and the error is final at once.
    _system_store(monkeypatch, tmp_path, certs.ca_cert)
    _expect_tls_error(capfd, tls_server, None, "publish-h2", "server_requires_tls", "requires TLS")


@pytest.mark.parametrize("operation", OPERATION_PARAMS)
def test_tls_against_plaintext(
    liftbridge_address: str,
    certs: TestCertificates,
    capfd: pytest.CaptureFixture[str],
    operation: str,
) -> None:
    tls = TLSOptions(ca_cert=str(certs.ca_cert))
    _expect_tls_error(capfd, liftbridge_address, tls, operation, "server_not_tls", "plaintext")


# ---------------------------------------------------------------- trust stores


def _system_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *cas: Path) -> None:
    """Make the system CA store exactly ``cas`` (a bundle in SSL_CERT_FILE, no directory),
    as OpenSSL reads it; the client reads it when it first builds its TLS set-up."""
    bundle = tmp_path / "system-bundle.pem"
    bundle.write_bytes(b"".join(ca.read_bytes() for ca in cas))
    empty = tmp_path / "system-certs"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setenv("SSL_CERT_DIR", str(empty))


def _every_path(client: Client, address: str, checked: list[str]) -> None:
    """Admin (grpcio), publish and subscribe (the client's transports) and the
    pre-flight diagnosis, all over TLS."""
    name = unique("trust")
    assert client.create_stream(name, name)
    assert name in client.fetch_metadata(name).streams
    first = client.publish(name, b"one")
    future = client.publish_async(name, b"two")
    client.flush()
    second = future.result()
    assert first is not None and second is not None
    assert (first.offset, second.offset) == (0, 1)
    with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
        assert [m.value for m in sub] == [b"one", b"two"]
    client.delete_stream(name)
    assert checked == [address], "one pre-flight, which passed"


def _record_preflights(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    checked: list[str] = []
    real = channels.preflight_tls

    def recording(address: str, *args: Any) -> bool:
        verdict = real(address, *args)
        checked.append(address)
        return verdict

    monkeypatch.setattr(channels, "preflight_tls", recording)
    return checked


TRANSPORT_PAIRS = [
    pytest.param("h2", "h2", id="h2"),
    pytest.param("grpc", "grpc", id="grpc"),
]


@pytest.mark.parametrize(("publish", "subscribe"), TRANSPORT_PAIRS)
def test_a_ca_only_in_the_system_store_serves_every_path(
    mtls_server: LiftbridgeServer,
    certs: TestCertificates,
    foreign: TestCertificates,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    publish: str,
    subscribe: str,
) -> None:
    # The test CA is in no other store grpcio or OpenSSL would read: grpcio's bundled
    # roots do not hold it, so admin calls prove grpcio got the system store's roots.
    _system_store(monkeypatch, tmp_path, foreign.ca_cert, certs.ca_cert)
    checked = _record_preflights(monkeypatch)
    cert, key = certs.client("alice")
    tls = TLSOptions(client_cert=str(cert), client_key=str(key))  # no ca_cert
    with _client(
        mtls_server, tls, publish_transport=publish, subscribe_transport=subscribe
    ) as client:
        _every_path(client, mtls_server.address, checked)


@pytest.mark.parametrize(("publish", "subscribe"), TRANSPORT_PAIRS)
def test_a_ca_only_in_ca_cert_serves_every_path(
    mtls_server: LiftbridgeServer,
    certs: TestCertificates,
    foreign: TestCertificates,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    publish: str,
    subscribe: str,
) -> None:
    _system_store(monkeypatch, tmp_path, foreign.ca_cert)  # the system store lacks it
    checked = _record_preflights(monkeypatch)
    builds: list[str] = []
    real_build = TLSSetup._build_context
    real_credentials = grpc.ssl_channel_credentials

    def build_context(setup: TLSSetup) -> ssl.SSLContext:
        builds.append("ssl")
        return real_build(setup)

    def credentials(*args: Any, **kwargs: Any) -> grpc.ChannelCredentials:
        builds.append("grpc")
        return real_credentials(*args, **kwargs)

    monkeypatch.setattr(TLSSetup, "_build_context", build_context)
    monkeypatch.setattr(grpc, "ssl_channel_credentials", credentials)
    with _client(
        mtls_server, _as(certs, "alice"), publish_transport=publish, subscribe_transport=subscribe
    ) as client:
        _every_path(client, mtls_server.address, checked)
        _every_path(client, mtls_server.address, checked)  # new subscription connections
    # Built once per client, whatever the number of connections and paths.
    assert sorted(builds) == ["grpc", "ssl"], builds


@pytest.mark.parametrize("operation", OPERATION_PARAMS)
def test_a_ca_in_neither_store_is_an_untrusted_ca(
    tls_server: LiftbridgeServer,
    foreign: TestCertificates,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    operation: str,
) -> None:
    _system_store(monkeypatch, tmp_path, foreign.ca_cert)
    error = _expect_tls_error(
        capfd, tls_server, TLSOptions(), operation, "server_certificate_untrusted", "trusted CA"
    )
    assert "system store" in str(error) and "SSL_CERT_FILE" in str(error)
    assert "issued by 'CN=liftbridge-sync test CA'" in str(error)


# ---------------------------------------------------------------- strict X.509


@pytest.fixture(scope="module")
def legacy_ca_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiftbridgeServer]:
    """A TLS server whose CA has no keyUsage (what `openssl req -x509` used to make)."""
    legacy = generate_certificates(tmp_path_factory.mktemp("legacy"), ca_key_usage=False)
    with LiftbridgeServer(tls=legacy.server_tls()) as server:
        yield server


@pytest.mark.parametrize("operation", OPERATION_PARAMS)
def test_a_ca_without_key_usage_under_strict_x509_verification(
    legacy_ca_server: LiftbridgeServer, capfd: pytest.CaptureFixture[str], operation: str
) -> None:
    # Python 3.13 turned VERIFY_X509_STRICT on by default; the client keeps the
    # interpreter's default (what any Python TLS client does there). Strict: a TLSError
    # naming strict verification and the missing key usage, from OpenSSL's verify code,
    # on every path (the pre-flight guards the grpcio channels too). Not strict
    # (3.11, 3.12): such a CA is accepted, as grpcio accepts it.
    strict = bool(ssl.create_default_context().verify_flags & ssl.VERIFY_X509_STRICT)
    assert strict == (sys.version_info >= (3, 13))
    tls = legacy_ca_server.client_tls()
    if strict:
        error = _expect_tls_error(
            capfd, legacy_ca_server, tls, operation, "strict_x509_verification", "strict X.509"
        )
        assert "key usage" in str(error).lower() and "trusted CA" not in str(error)
        return
    name = unique("legacy")
    _, transport = OPERATIONS[operation]
    with _client(legacy_ca_server, tls, publish_transport=transport) as client:
        client.create_stream(name, name)
        assert client.publish(name, b"x") is not None
        with client.subscribe(name, start=StartAt.earliest(), stop=StopAt.latest()) as sub:
            assert [m.value for m in sub] == [b"x"]
        client.delete_stream(name)


def test_a_key_that_does_not_match_the_certificate_is_a_configuration_error(
    mtls_server: LiftbridgeServer, certs: TestCertificates
) -> None:
    cert, _ = certs.client("alice")
    _, other_key = certs.client("bob")
    tls = TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(other_key))
    with _client(mtls_server, tls) as client, pytest.raises(lb.ConfigurationError, match="key"):
        client.fetch_metadata()


# ---------------------------------------------------------------- ACLs


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_acl_allows_what_the_policy_lists(
    authz_server: LiftbridgeServer,
    certs: TestCertificates,
    transport: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with _client(authz_server, _as(certs, "alice"), publish_transport=transport) as client:
        client.create_stream(ALLOWED, ALLOWED, exist_ok=True)
        first = client.publish(ALLOWED, b"hello")
        assert first is not None
        future = client.publish_async(ALLOWED, b"again")
        client.flush()
        again = future.result()
        assert again is not None and again.offset == first.offset + 1
        with client.subscribe(
            ALLOWED, start=StartAt.offset(first.offset), stop=StopAt.offset(first.offset + 1)
        ) as sub:
            assert [m.value for m in sub] == [b"hello", b"again"]
        client.set_cursor("c", ALLOWED, 0, first.offset)
        # alice may not ask about __cursors itself: cursors are read as the server has
        # them, and a WARNING says once why they may be older after a restart.
        with caplog.at_level(logging.WARNING, logger="liftbridge_sync"):
            assert client.fetch_cursor("c", ALLOWED, 0) == first.offset
            assert client.fetch_cursor("c", ALLOWED, 0) == first.offset
        told = [r for r in caplog.records if "__cursors partition" in r.getMessage()]
        assert len(told) == 1 and "FetchPartitionMetadata" in told[0].getMessage()


def _denied(call: Callable[[], object], operation: str, resource: str) -> None:
    started = time.monotonic()
    with pytest.raises(lb.PermissionDeniedError) as info:
        call()
    assert time.monotonic() - started < QUICK
    assert info.value.operation == operation
    assert info.value.resource == resource
    assert operation in str(info.value) and resource in str(info.value)


def test_acl_denies_create_and_delete_outside_the_policy(
    authz_server: LiftbridgeServer, certs: TestCertificates
) -> None:
    with _client(authz_server, _as(certs, "alice")) as alice:
        _denied(lambda: alice.create_stream(FORBIDDEN, FORBIDDEN), "CreateStream", FORBIDDEN)
        assert FORBIDDEN not in alice.fetch_metadata().streams
        alice.create_stream(ALLOWED, ALLOWED, exist_ok=True)
    with _client(authz_server, _as(certs, "bob")) as bob:
        _denied(lambda: bob.delete_stream(ALLOWED), "DeleteStream", ALLOWED)
        assert ALLOWED in bob.fetch_metadata().streams


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_acl_denies_publish(
    authz_server: LiftbridgeServer, certs: TestCertificates, transport: str
) -> None:
    with _client(authz_server, _as(certs, "alice")) as alice:
        alice.create_stream(ALLOWED, ALLOWED, exist_ok=True)
        before = alice.publish(ALLOWED, b"before")
        with _client(authz_server, _as(certs, "bob"), publish_transport=transport) as bob:
            _denied(lambda: bob.publish(ALLOWED, b"from bob"), "Publish", ALLOWED)
        after = alice.publish(ALLOWED, b"after")
        assert before is not None and after is not None
        with alice.subscribe(
            ALLOWED, start=StartAt.offset(before.offset), stop=StopAt.offset(after.offset)
        ) as sub:
            stored = [m.value for m in sub]
    if authz_server.installed.version == "v1.9.0":
        # Server bug (liftbridge-api.md §4.5): PublishAsync reports PERMISSION_DENIED but
        # does not skip the message, so it is stored all the same. The client reports the
        # refusal; it cannot undo the write.
        assert stored == [b"before", b"from bob", b"after"]
    else:
        assert stored[0] == b"before" and stored[-1] == b"after"


def test_acl_denies_subscribe_and_cursors(
    authz_server: LiftbridgeServer, certs: TestCertificates
) -> None:
    with _client(authz_server, _as(certs, "alice")) as alice:
        alice.create_stream(ALLOWED, ALLOWED, exist_ok=True)
    with _client(authz_server, _as(certs, "bob")) as bob:
        _denied(lambda: bob.subscribe(ALLOWED, start=StartAt.earliest()), "Subscribe", ALLOWED)
        _denied(lambda: bob.fetch_cursor("c", ALLOWED, 0), "FetchCursor", ALLOWED)
        _denied(lambda: bob.set_cursor("c", ALLOWED, 0, 1), "SetCursor", ALLOWED)
