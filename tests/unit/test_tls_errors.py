"""TLS failures and ACL refusals in the status mapping (the texts are real server/gRPC ones)."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import grpc
import pytest

import liftbridge_sync as lb
from liftbridge_sync._wire.status import (
    CallContext,
    closed_at_connect,
    error_from_async_error,
    error_from_status,
    error_from_tls_exception,
    plaintext_refused_error,
)
from liftbridge_sync.testing import ServerTLS, write_policy

SC = grpc.StatusCode
_PREFIX = "failed to connect to all addresses; last error: "


def test_a_plaintext_connection_closed_at_connect_is_not_decided_from_the_status() -> None:
    # A TLS-only broker closes it, but so does a restarting one: the transport asks
    # the port for a verified TLS answer before calling it a TLS error.
    details = _PREFIX + "UNAVAILABLE: ipv4:127.0.0.1:35091: Socket closed"
    error = error_from_status(SC.UNAVAILABLE, details, CallContext.GENERIC)
    assert type(error) is lb.BrokerUnavailableError and error.retryable
    assert closed_at_connect(details)
    assert not closed_at_connect("Socket closed")  # a broken stream, not a connect


@pytest.mark.parametrize(
    ("details", "reason"),
    [
        (
            _PREFIX + "UNAVAILABLE: ipv4:127.0.0.1:35091: Unwrap failed (TSI_DATA_CORRUPTED)",
            "client_certificate_missing_or_rejected",
        ),
        (
            _PREFIX + "UNKNOWN: ipv4:127.0.0.1:35091: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
            "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:"
            "CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate: OK",
            "server_certificate_untrusted",
        ),
        (
            _PREFIX + "UNKNOWN: ipv4:127.0.0.1:35091: Custom verification check failed with "
            "error: UNAUTHENTICATED: Hostname Verification Check failed.",
            "server_name_mismatch",
        ),
        (
            _PREFIX + "UNKNOWN: ipv4:127.0.0.1:58877: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
            "SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: "
            "Invalid certificate verification context: OK",
            "server_not_tls",
        ),
    ],
)
def test_grpc_tls_failures_become_non_retryable_tls_errors(details: str, reason: str) -> None:
    error = error_from_status(SC.UNAVAILABLE, details, CallContext.GENERIC)
    assert type(error) is lb.TLSError
    assert isinstance(error, lb.BrokerUnavailableError)
    assert error.reason == reason
    assert not error.retryable
    assert error.code == "UNAVAILABLE"
    assert error.details == details
    assert "TLS failure" in str(error)


@pytest.mark.parametrize(
    "details",
    [
        "",
        "Socket closed",  # an established stream that broke: retry
        _PREFIX + "UNAVAILABLE: ipv4:127.0.0.1:1: Connection refused",
        "recvmsg:Connection reset by peer",
    ],
)
def test_other_unavailable_statuses_stay_retryable(details: str) -> None:
    error = error_from_status(SC.UNAVAILABLE, details)
    assert type(error) is lb.BrokerUnavailableError
    assert error.retryable


def _ssl_error(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}] ({reason.lower()})")
    error.reason = reason
    return error


@pytest.mark.parametrize(
    ("reason_code", "reason"),
    [
        ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "client_certificate_required"),
        ("TLSV1_ALERT_UNKNOWN_CA", "client_certificate_rejected"),
        ("WRONG_VERSION_NUMBER", "server_not_tls"),
        ("SOMETHING_ELSE", "handshake_failed"),
    ],
)
def test_ssl_errors_of_the_preflight(reason_code: str, reason: str) -> None:
    error = error_from_tls_exception("127.0.0.1:9292", _ssl_error(reason_code))
    assert error.reason == reason
    assert "127.0.0.1:9292" in str(error)
    assert not error.retryable


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("unable to get local issuer certificate", "server_certificate_untrusted"),
        ("Hostname mismatch, certificate is not valid for 'x'.", "server_name_mismatch"),
        ("IP address mismatch, certificate is not valid for '10.0.0.1'.", "server_name_mismatch"),
    ],
)
def test_certificate_verification_errors_of_the_preflight(message: str, reason: str) -> None:
    exc = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    exc.verify_message = message
    assert error_from_tls_exception("h:1", exc).reason == reason


def test_tls_error_survives_pickling_with_its_reason() -> None:
    original = lb.TLSError("boom", reason="server_name_mismatch", code="UNAVAILABLE")
    copy = pickle.loads(pickle.dumps(original))
    assert (type(copy), copy.reason, str(copy), copy.code) == (
        lb.TLSError,
        "server_name_mismatch",
        "boom",
        "UNAVAILABLE",
    )


@pytest.mark.parametrize(
    ("code", "context"),
    [(SC.UNKNOWN, CallContext.CREATE_STREAM), (SC.UNKNOWN, CallContext.SUBSCRIBE_OPEN)],
)
def test_acl_refusals_name_operation_and_stream(
    code: grpc.StatusCode, context: CallContext
) -> None:
    details = "The client is not authorized to call CreateStream on resource orders"
    error = error_from_status(code, details, context)
    assert type(error) is lb.PermissionDeniedError
    assert (error.operation, error.resource) == ("CreateStream", "orders")
    assert "CreateStream" in str(error) and "'orders'" in str(error)
    assert error.details == details
    assert not error.retryable
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.operation, copy.resource) == ("CreateStream", "orders")


def test_acl_refusal_inside_publish_async() -> None:
    error = error_from_async_error(
        7, "The client is not authorized to call Publish on resource orders"
    )
    assert type(error) is lb.PermissionDeniedError
    assert (error.operation, error.resource, error.code) == (
        "Publish",
        "orders",
        "PERMISSION_DENIED",
    )


def test_permission_denied_without_a_server_text() -> None:
    error = error_from_status(SC.PERMISSION_DENIED, "")
    assert type(error) is lb.PermissionDeniedError
    assert error.operation is None and error.resource is None


def test_server_tls_refuses_incoherent_settings(tmp_path: Path) -> None:
    pem = tmp_path / "x.pem"
    with pytest.raises(ValueError, match="client_cert"):
        ServerTLS(cert=pem, key=pem, ca=pem, client_ca=pem)
    with pytest.raises(ValueError, match="mutual TLS"):
        ServerTLS(cert=pem, key=pem, ca=pem, authz_policy=pem)
    tls = ServerTLS(cert=pem, key=pem, ca=pem, client_ca=pem, client_cert=pem, client_key=pem)
    assert tls.mutual and not tls.authz
    config = tls.server_config(tmp_path)
    assert config["tls.client.auth.enabled"] is True
    assert "tls.client.authz.enabled" not in config


def test_write_policy(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.csv", [("alice", "orders", "Publish")])
    assert path.read_text() == "p, alice, orders, Publish\n"
    with pytest.raises(ValueError):
        write_policy(tmp_path / "q.csv", [("alice", "a,b", "Publish")])


def _verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    exc.verify_code = code
    exc.verify_message = message
    return exc


def test_a_failure_only_strict_verification_raises_is_named_so() -> None:
    # 92 = X509_V_ERR_CA_CERT_MISSING_KEY_USAGE: raised only with VERIFY_X509_STRICT.
    exc = _verify_error(92, "CA cert does not include key usage extension")
    error = error_from_tls_exception("h:1", exc, strict=True)
    assert error.reason == "strict_x509_verification"
    assert "strict X.509" in str(error) and "key usage" in str(error)
    assert not error.retryable
    # Without strict verification that code cannot come from it: no claim is made.
    assert error_from_tls_exception("h:1", exc).reason == "server_certificate_untrusted"
    # And an unknown issuer under strict verification is still an untrusted CA.
    unknown = _verify_error(20, "unable to get local issuer certificate")
    assert error_from_tls_exception("h:1", unknown, strict=True).reason == (
        "server_certificate_untrusted"
    )


def test_an_untrusted_ca_says_which_store_was_used() -> None:
    exc = _verify_error(20, "unable to get local issuer certificate")
    assert "system store" in str(error_from_tls_exception("h:1", exc, system_roots=True))
    assert "system store" not in str(error_from_tls_exception("h:1", exc))


def test_a_plaintext_refusal_is_final_only_when_the_tls_answer_was_verified() -> None:
    hint = plaintext_refused_error("publish", "closed", verified=False)
    assert type(hint) is lb.BrokerUnavailableError and hint.retryable
    assert "answers a TLS handshake" in str(hint) and "ClientOptions.tls" in str(hint)
    final = plaintext_refused_error("publish", "closed", verified=True)
    assert type(final) is lb.TLSError and not final.retryable
    assert final.reason == "server_requires_tls"
