"""One TLS set-up per client: the roots (ca_cert or the system store as OpenSSL reads it),
one ssl context and one set of grpc credentials, and no key material on disk."""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import liftbridge_sync as lb
from liftbridge_sync import TLSOptions
from liftbridge_sync._transport import tls as tls_module
from liftbridge_sync._transport.h2.sockets import speaks_tls
from liftbridge_sync._transport.tls import TLSSetup, certificate_issuer, system_roots
from liftbridge_sync.testing import TestCertificates, generate_certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"), clients=["alice", "bob"])


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("other"), ca_name="another CA")


def _ders(pem: bytes) -> set[bytes]:
    store = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    store.load_verify_locations(cadata=pem.decode())
    return set(store.get_ca_certs(binary_form=True))


def _der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def _store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *cas: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(b"".join(ca.read_bytes() for ca in cas))
    directory = tmp_path / "certs"
    directory.mkdir()
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setenv("SSL_CERT_DIR", str(directory))
    return directory


def test_system_roots_honour_ssl_cert_file_and_ssl_cert_dir(
    certs: TestCertificates,
    other: TestCertificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    directory = _store(monkeypatch, tmp_path, certs.ca_cert)
    (directory / "0123abcd.0").write_bytes(other.ca_cert.read_bytes())  # a hashed name
    (directory / "ignored.pem").write_bytes(b"not even PEM")  # OpenSSL would not look
    assert _ders(system_roots()) == {_der(certs.ca_cert), _der(other.ca_cert)}


def test_system_roots_are_read_again_only_once_the_store_changed(
    certs: TestCertificates,
    other: TestCertificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    directory = _store(monkeypatch, tmp_path, certs.ca_cert)
    reads: list[str] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, cafile: str | None = None, **kwargs: Any) -> None:
        if cafile is not None:
            reads.append(cafile)
        load(self, cafile, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    first = system_roots()
    assert system_roots() is first  # the second client's first TLS call reads nothing
    assert reads == [str(tmp_path / "bundle.pem")]
    # A certificate added to the directory (its change time moves) is seen.
    (directory / "0123abcd.0").write_bytes(other.ca_cert.read_bytes())
    os.utime(directory, ns=(1, 1))
    assert _ders(system_roots()) == {_der(certs.ca_cert), _der(other.ca_cert)}
    # So is another store named by the environment.
    _store(monkeypatch, tmp_path / "later", other.ca_cert)
    assert _ders(system_roots()) == {_der(other.ca_cert)}


def test_an_empty_system_store_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(monkeypatch, tmp_path)
    with pytest.raises(lb.ConfigurationError, match="SSL_CERT_FILE"):
        TLSSetup(TLSOptions()).context()


def test_every_path_gets_the_same_roots_built_once(
    certs: TestCertificates,
    other: TestCertificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _store(monkeypatch, tmp_path, other.ca_cert)
    setup = TLSSetup(TLSOptions())
    context = setup.context()
    credentials = setup.channel_credentials()
    assert {c for c in context.get_ca_certs(binary_form=True)} == _ders(setup.roots())
    assert _ders(setup.roots()) == {_der(other.ca_cert)}
    # Built once: a changed store is not read again by this client.
    _store(monkeypatch, tmp_path / "later", certs.ca_cert)
    assert setup.context() is context and setup.channel_credentials() is credentials
    assert _ders(setup.roots()) == {_der(other.ca_cert)}


def test_ca_cert_replaces_the_system_store(
    certs: TestCertificates, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(monkeypatch, tmp_path)  # empty: would be an error if it were read
    setup = TLSSetup(TLSOptions(ca_cert=str(certs.ca_cert)))
    assert _ders(setup.roots()) == {_der(certs.ca_cert)}
    assert setup.context().get_ca_certs(binary_form=True) == [_der(certs.ca_cert)]


def test_concurrent_first_uses_build_one_context(certs: TestCertificates) -> None:
    cert, key = certs.client("alice")
    setup = TLSSetup(
        TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(key))
    )
    seen: list[ssl.SSLContext] = []
    threads = [
        threading.Thread(target=lambda: seen.append(setup.context()), name=f"liftbridge-t{i}")
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 8 and len({id(c) for c in seen}) == 1


@pytest.fixture
def no_temp_files(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("key material written to a temporary file")

    for name in ("mkstemp", "NamedTemporaryFile", "TemporaryFile", "mkdtemp"):
        monkeypatch.setattr(tempfile, name, refuse)


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "pipe"])
def test_the_client_key_never_touches_a_file_system(
    certs: TestCertificates, monkeypatch: pytest.MonkeyPatch, no_temp_files: None, memfd: bool
) -> None:
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    elif not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create on this platform")
    opened: list[str] = []
    real_load = ssl.SSLContext.load_cert_chain

    def recording(
        self: ssl.SSLContext, certfile: str, keyfile: str | None = None, password: object = None
    ) -> None:
        opened.extend(p for p in (certfile, keyfile) if p)
        real_load(self, certfile, keyfile)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", recording)
    cert, key = certs.client("alice")
    setup = TLSSetup(
        TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(key))
    )
    setup.context()
    assert len(opened) == 2
    assert all(p.startswith(("/proc/self/fd/", "/dev/fd/")) for p in opened), opened


def test_without_descriptor_paths_a_private_file_is_removed_at_once(
    certs: TestCertificates, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tls_module, "_FD_DIRS", ())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cert, key = certs.client("alice")
    setup = TLSSetup(
        TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(key))
    )
    setup.context()
    assert list(tmp_path.iterdir()) == []


def test_a_key_that_does_not_match_is_a_configuration_error(certs: TestCertificates) -> None:
    cert, _ = certs.client("alice")
    _, key = certs.client("bob")
    setup = TLSSetup(
        TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(key))
    )
    with pytest.raises(lb.ConfigurationError, match="key"):
        setup.context()


def test_an_encrypted_client_key_is_a_configuration_error_not_a_passphrase_prompt(
    certs: TestCertificates, tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives import serialization

    cert, key = certs.client("alice")
    plain = serialization.load_pem_private_key(key.read_bytes(), None)
    encrypted = tmp_path / "encrypted-key.pem"
    encrypted.write_bytes(
        plain.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    tls = TLSOptions(ca_cert=str(certs.ca_cert), client_cert=str(cert), client_key=str(encrypted))
    # OpenSSL would ask for the passphrase on the terminal (or fail with a bare OSError
    # without one); the TLS set-up is made before anything is dialled.
    with lb.Client("127.0.0.1:1", tls=tls) as client:
        with pytest.raises(lb.ConfigurationError, match="encrypted"):
            client.fetch_metadata()


# ---------------------------------------------------------------- the plaintext probe


@pytest.fixture
def tls_listener(certs: TestCertificates) -> Iterator[tuple[str, int]]:
    """A local TLS server (certificate for 127.0.0.1 from the test CA), one thread."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    with context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except (ssl.SSLError, OSError):
                    pass

    thread = threading.Thread(target=serve, name="liftbridge-test-tls", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[:2]
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close() does not)
        listener.close()
        thread.join(10)


def test_the_probe_verifies_against_the_system_store(
    tls_listener: tuple[str, int],
    certs: TestCertificates,
    other: TestCertificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _store(monkeypatch, tmp_path, other.ca_cert)
    assert speaks_tls(tls_listener) == "unverified"
    _store(monkeypatch, tmp_path / "trusted", certs.ca_cert)
    assert speaks_tls(tls_listener) == "verified"


def test_the_probe_of_a_plaintext_peer() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()[:2]
        closer = threading.Thread(
            target=lambda: listener.accept()[0].close(), name="liftbridge-test-close"
        )
        closer.start()
        assert speaks_tls(address) is None
        closer.join(10)


def test_the_issuer_of_a_certificate(certs: TestCertificates, other: TestCertificates) -> None:
    assert certificate_issuer(_der(certs.server_cert)) == "CN=liftbridge-sync test CA"
    assert certificate_issuer(_der(other.ca_cert)) == "CN=another CA"
    der = _der(certs.server_cert)
    assert certificate_issuer(der[:40]) is None
    assert certificate_issuer(b"") is None
