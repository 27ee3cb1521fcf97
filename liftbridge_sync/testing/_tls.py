"""TLS, mutual TLS and casbin ACLs for harness-run servers, and test certificates.

:class:`ServerTLS` is what :class:`~liftbridge_sync.testing.LiftbridgeServer` takes as
``tls=``: paths to PEM files (and, for ACLs, a casbin policy). It turns them into the
server's ``tls.*`` keys and gives the readiness probe the same credentials a client
would use, so a TLS server is probed over TLS.

:func:`generate_certificates` makes a throw-away PKI at test time with the
``cryptography`` package (the ``test`` extra): a CA, a server certificate for
``localhost`` and ``127.0.0.1``, and client certificates whose Common Names are the
identities the server's ACLs check. Nothing here is meant for production keys.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from liftbridge_sync.options import TLSOptions

__all__ = [
    "AUTHZ_MODEL",
    "PROBE_CLIENT",
    "ServerTLS",
    "TestCertificates",
    "generate_certificates",
    "write_policy",
]

#: The server's own casbin model (``server/configs/authz/model.conf``): a request
#: ``(client certificate CN, stream, RPC name)`` is allowed when a policy line
#: ``p, <cn>, <stream>, <rpc>`` equals it field by field.
AUTHZ_MODEL = """\
[request_definition]
r = sub, obj, act

[policy_definition]
p = sub, obj, act

[policy_effect]
e = some(where (p.eft == allow))

[matchers]
m = r.sub == p.sub && r.obj == p.obj && r.act == p.act
"""

#: Common Name of the client certificate :func:`generate_certificates` always makes for
#: the harness's readiness probe (the ``client_cert`` of :meth:`TestCertificates.server_tls`).
PROBE_CLIENT = "liftbridge-harness"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerTLS:
    """TLS settings of a harness-run server: paths to PEM files, and ACLs.

    * TLS: ``cert`` and ``key`` (the server's), ``ca`` (what clients verify them with).
    * Mutual TLS: also ``client_ca``; the server then refuses clients without a
      certificate signed by it. ``client_cert`` and ``client_key`` are the identity the
      readiness probe presents (required with ``client_ca``).
    * ACLs: also ``authz_policy``, a casbin ``policy.csv`` of lines
      ``p, <client CN>, <stream>, <RPC name>`` (see :func:`write_policy`). The policy
      must allow the probe's CN ``FetchMetadata`` on ``*``, or the server never looks
      ready (the harness then fails at once and says so). ``authz_model`` defaults to
      the server's own model (:data:`AUTHZ_MODEL`, written next to the config).

    The harness writes both ``tls.client.auth.enabled`` and
    ``tls.client.authz.enabled`` for ACLs: the server reads the authz switch from the
    *auth* key (a config bug in v1.9.0 and the pinned commit).

    Immutable, hence thread-safe.
    """

    #: Server certificate (chain), PEM.
    cert: Path
    #: Private key of ``cert``, PEM.
    key: Path
    #: CA certificate that signed ``cert``; the probe verifies the server with it.
    ca: Path
    #: CA for client certificates; setting it turns on mutual TLS.
    client_ca: Path | None = None
    #: Certificate the readiness probe presents under mutual TLS.
    client_cert: Path | None = None
    #: Private key of ``client_cert``.
    client_key: Path | None = None
    #: casbin policy file; setting it turns on ACLs (needs ``client_ca``).
    authz_policy: Path | None = None
    #: casbin model file (default: :data:`AUTHZ_MODEL`).
    authz_model: Path | None = None
    #: Name the probe checks the server certificate against (default: the address host).
    server_name: str | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name != "server_name" and value is not None:
                object.__setattr__(self, field.name, Path(value).absolute())
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("ServerTLS: 'client_cert' and 'client_key' go together")
        if self.client_ca is not None and self.client_cert is None:
            raise ValueError(
                "ServerTLS: mutual TLS ('client_ca') needs 'client_cert' and 'client_key' "
                "for the readiness probe"
            )
        if self.authz_policy is None and self.authz_model is not None:
            raise ValueError("ServerTLS: 'authz_model' without 'authz_policy'")
        if self.authz_policy is not None and self.client_ca is None:
            raise ValueError(
                "ServerTLS: ACLs ('authz_policy') need mutual TLS ('client_ca'): the "
                "identity checked is the client certificate's Common Name"
            )

    @property
    def mutual(self) -> bool:
        """Whether the server requires client certificates."""
        return self.client_ca is not None

    @property
    def authz(self) -> bool:
        """Whether the server enforces ACLs."""
        return self.authz_policy is not None

    def server_config(self, run_dir: Path) -> dict[str, object]:
        """The server's ``tls.*`` keys (flat), writing the default model to ``run_dir``.

        Args:
            run_dir: Directory for generated files (the casbin model).

        Returns:
            A new dict of dotted keys.
        """
        config: dict[str, object] = {"tls.cert": str(self.cert), "tls.key": str(self.key)}
        if self.client_ca is not None:
            config["tls.client.auth.enabled"] = True
            config["tls.client.auth.ca"] = str(self.client_ca)
        if self.authz_policy is not None:
            model = self.authz_model
            if model is None:
                model = run_dir / "authz-model.conf"
                model.write_text(AUTHZ_MODEL)
            config["tls.client.authz.enabled"] = True
            config["tls.client.authz.model"] = str(model)
            config["tls.client.authz.policy"] = str(self.authz_policy)
        return config

    def client_options(
        self, cert: str | Path | None = None, key: str | Path | None = None
    ) -> TLSOptions:
        """:class:`~liftbridge_sync.TLSOptions` for a client of this server.

        Args:
            cert: Client certificate (default: ``client_cert``, the probe's identity).
            key: Its private key (default: ``client_key``).

        Returns:
            Options that trust ``ca`` and present the chosen certificate, if any.
        """
        from liftbridge_sync.options import TLSOptions

        if cert is None and key is None:
            cert, key = self.client_cert, self.client_key
        return TLSOptions(
            ca_cert=str(self.ca),
            client_cert=None if cert is None else str(cert),
            client_key=None if key is None else str(key),
            server_name=self.server_name,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TestCertificates:
    """PEM files made by :func:`generate_certificates`.

    Immutable, hence thread-safe.
    """

    #: Directory holding every file.
    directory: Path
    #: The CA certificate (trust anchor for the server and the client certificates).
    ca_cert: Path
    #: The CA's private key.
    ca_key: Path
    #: Server certificate for the requested hosts, signed by the CA.
    server_cert: Path
    #: Its private key.
    server_key: Path
    #: Client Common Name to ``(certificate, key)``, signed by the CA.
    clients: Mapping[str, tuple[Path, Path]]

    __test__ = False  # not a pytest test class, despite the name

    def client(self, common_name: str) -> tuple[Path, Path]:
        """``(certificate, key)`` of the client certificate with this Common Name.

        Raises:
            KeyError: If no such client certificate was generated.
        """
        return self.clients[common_name]

    def server_tls(
        self,
        *,
        mutual: bool = False,
        authz_policy: Path | None = None,
        probe_client: str = PROBE_CLIENT,
    ) -> ServerTLS:
        """A :class:`ServerTLS` from these files.

        Args:
            mutual: Require client certificates signed by this CA.
            authz_policy: casbin policy file (implies ``mutual``).
            probe_client: Common Name of the certificate the readiness probe presents.

        Returns:
            The settings.
        """
        mutual = mutual or authz_policy is not None
        cert, key = self.client(probe_client) if mutual else (None, None)
        return ServerTLS(
            cert=self.server_cert,
            key=self.server_key,
            ca=self.ca_cert,
            client_ca=self.ca_cert if mutual else None,
            client_cert=cert,
            client_key=key,
            authz_policy=authz_policy,
        )


def write_policy(path: Path, rules: Iterable[Sequence[str]]) -> Path:
    """Write a casbin policy file of ``p, <client CN>, <stream>, <RPC name>`` lines.

    The RPC names the server checks: CreateStream, DeleteStream, PauseStream,
    SetStreamReadonly, Subscribe, FetchMetadata (stream ``*``),
    FetchPartitionMetadata, Publish (also PublishAsync), PublishToSubject (the
    object is the subject), SetCursor, FetchCursor. SetCursor also needs
    ``Publish`` on ``__cursors``.

    Args:
        path: File to write.
        rules: ``(client CN, stream, RPC name)`` triples.

    Returns:
        ``path``.

    Raises:
        ValueError: If a rule is not three non-empty fields without commas.
    """
    lines = []
    for rule in rules:
        fields = [str(field) for field in rule]
        if len(fields) != 3 or any(not f or "," in f or "\n" in f for f in fields):
            raise ValueError(f"a policy rule is (client CN, stream, RPC name), got {rule!r}")
        lines.append("p, " + ", ".join(fields))
    path.write_text("\n".join(lines) + "\n")
    return path


def generate_certificates(
    directory: str | Path,
    *,
    clients: Iterable[str] = (),
    hosts: Iterable[str] = ("localhost", "127.0.0.1"),
    ca_name: str = "liftbridge-sync test CA",
    valid_for: datetime.timedelta = datetime.timedelta(days=2),
    ca_key_usage: bool = True,
) -> TestCertificates:
    """Generate a CA, a server certificate and client certificates as PEM files.

    Keys are ECDSA P-256. The certificates carry the extensions a public CA's do, so
    that strict X.509 verification (Python's default from 3.13 on) accepts them: the
    CA a critical ``basicConstraints`` (CA, path length 0), a critical ``keyUsage``
    (keyCertSign, cRLSign) and subject and authority key identifiers; every leaf a
    critical ``basicConstraints`` (not a CA), a critical ``keyUsage`` of
    digitalSignature (the only use of an ECDSA key in TLS; keyEncipherment is for RSA
    key transport, RFC 5480 forbids it for EC keys), an ``extendedKeyUsage`` and key
    identifiers. The server certificate has a SAN entry per host (IP addresses as IP
    entries) and is for server authentication; client certificates carry the Common
    Name as the server's ACL identity and are for client authentication. A client
    certificate for :data:`PROBE_CLIENT` is always made, for the harness's readiness
    probe.

    Args:
        directory: Where to write the files (created if missing).
        clients: Common Names of client certificates to make.
        hosts: DNS names and IP addresses of the server certificate.
        ca_name: Common Name of the CA (use distinct ones for distinct CAs).
        valid_for: Validity, starting an hour ago (clock skew).
        ca_key_usage: ``False`` leaves ``keyUsage`` out of the CA certificate, as older
            tools did (``openssl req -x509`` without a config): strict verification
            rejects such a CA, lenient verification accepts it.

    Returns:
        The paths.

    Raises:
        ModuleNotFoundError: If ``cryptography`` is not installed (``pip install
            'liftbridge-sync[test]'``).
    """
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(directory).absolute()
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + valid_for

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def write(
        stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
    ) -> tuple[Path, Path]:
        cert_path, key_path = out / f"{stem}.pem", out / f"{stem}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_path.chmod(0o600)
        return cert_path, key_path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_public = ca_key.public_key()
    ca_builder = (
        x509.CertificateBuilder()
        .subject_name(name(ca_name))
        .issuer_name(name(ca_name))
        .public_key(ca_public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        # A path length needs keyCertSign (strict verification checks that first).
        .add_extension(
            x509.BasicConstraints(ca=True, path_length=0 if ca_key_usage else None),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False
        )
    )
    if ca_key_usage:
        ca_builder = ca_builder.add_extension(
            _key_usage(x509, key_cert_sign=True, crl_sign=True), critical=True
        )
    ca_cert = ca_builder.sign(ca_key, hashes.SHA256())
    ca_paths = write("ca", ca_cert, ca_key)

    def leaf(
        common_name: str, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(x509, digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    server_paths = write(
        "server", *leaf("liftbridge-server", ExtendedKeyUsageOID.SERVER_AUTH, sans)
    )

    client_paths: dict[str, tuple[Path, Path]] = {}
    for index, common_name in enumerate(dict.fromkeys([PROBE_CLIENT, *clients])):
        cert, key = leaf(common_name, ExtendedKeyUsageOID.CLIENT_AUTH, [])
        client_paths[common_name] = write(f"client{index}", cert, key)

    return TestCertificates(
        directory=out,
        ca_cert=ca_paths[0],
        ca_key=ca_paths[1],
        server_cert=server_paths[0],
        server_key=server_paths[1],
        clients=client_paths,
    )


def _key_usage(x509: Any, **usages: bool) -> Any:
    """An ``x509.KeyUsage`` with ``usages`` set and every other bit clear."""
    names = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{n: usages.get(n, False) for n in names})
