"""One client's TLS set-up, shared by every connection the client makes.

The ``"h2"`` publish and subscribe dials, the grpcio channels and the TLS pre-flight
(``channels.preflight_tls``) all take their trust and identity from one
:class:`TLSSetup`, so a broker is trusted by all of them or by none:

* **Roots.** ``TLSOptions.ca_cert`` when given; otherwise the system store as OpenSSL
  finds it: the file named by ``SSL_CERT_FILE`` (else the platform's default bundle)
  and the hashed certificates in ``SSL_CERT_DIR`` (else the default directory). They are
  read once and kept as PEM: the ``ssl`` context loads exactly that PEM, and grpcio gets
  it as ``root_certificates`` (left out, grpcio would trust its own bundled roots, a
  different set).
* **Identity.** The client certificate and key are loaded into the ``ssl`` context
  without touching a file system: ``ssl`` reads them only from a path, so they are
  written to an anonymous memory file (``memfd_create``, Linux) or, where there is none,
  to a pipe, and read back through ``/proc/self/fd`` or ``/dev/fd``. Only a platform with
  neither (Windows) falls back to a private temporary file, removed right after loading.
* **Once.** The ``ssl`` context and the grpc credentials are built on first use and
  then reused by every connection of the client; nothing is read again on reconnects.

Strict X.509 verification is the interpreter's default: ``ssl.create_default_context``
enables ``VERIFY_X509_STRICT`` from Python 3.13 on, and it is kept as is (it applies to
the pre-flight, hence to every path; grpcio's own verifier has no strict mode).

When verification fails, :func:`peer_issuer` reads the issuer the broker's certificate
names (unverified, for the error message only: which CA to look for).

Thread-safe: :class:`TLSSetup` builds under a lock, then hands out objects it never
changes again (an ``ssl`` context may wrap sockets from any thread); the functions keep
no state.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import ssl
import tempfile
import threading
from collections.abc import Iterator

import grpc

from liftbridge_sync._transport.aborting import DialAbort, connect, watching
from liftbridge_sync.errors import ConfigurationError, LocalResourceError
from liftbridge_sync.options import TLSOptions

__all__ = ["TLSSetup", "certificate_issuer", "peer_issuer", "system_roots"]

#: Names OpenSSL looks up in a certificate directory: ``<subject hash>.<n>``.
_HASHED_NAME = re.compile(r"^[0-9a-f]{8}\.[0-9]+$")
#: Attribute types of a distinguished name worth showing, by DER-encoded OID.
_NAME_ATTRIBUTES = {
    b"\x55\x04\x03": "CN",
    b"\x55\x04\x0b": "OU",
    b"\x55\x04\x0a": "O",
    b"\x55\x04\x06": "C",
}
#: Where an open descriptor can be opened again by path.
_FD_DIRS = ("/proc/self/fd", "/dev/fd")


#: The last system store read: where it was and how those places looked, and its PEM.
_roots_read: tuple[tuple[object, ...], bytes] | None = None
_roots_lock = threading.Lock()


def system_roots() -> bytes:
    """The CA certificates OpenSSL trusts by default, as PEM.

    Honours ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` as OpenSSL does
    (``ssl.get_default_verify_paths``). Only CA certificates are kept (what
    ``SSLContext.get_ca_certs`` lists). Read once per process while the bundle file and
    the directory stay as they were: reading them (a Debian store is a bundle and some
    300 files) takes 0.3 s of CPU, and several seconds for a client's first TLS call
    when other threads hold the GIL. Thread-safe: concurrent callers read it once.

    Raises:
        ConfigurationError: if neither place holds a CA certificate.
        LocalResourceError: the process has no file descriptor left to read them.
    """
    global _roots_read
    paths = ssl.get_default_verify_paths()
    with _roots_lock:
        looks = (paths.cafile, paths.capath, _looks(paths.cafile), _looks(paths.capath))
        if _roots_read is not None and _roots_read[0] == looks:
            return _roots_read[1]
        pem = _read_roots(paths)
        _roots_read = (looks, pem)
        return pem


def _looks(path: str | None) -> tuple[int, int, int] | None:
    """What tells a changed file or directory: its inode, size and change time."""
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _read_roots(paths: ssl.DefaultVerifyPaths) -> bytes:
    """The PEM of every CA certificate in the bundle and directory ``paths`` name.

    Raises:
        ConfigurationError: if neither place holds a CA certificate.
        LocalResourceError: the process has no file descriptor left to read them.
    """
    store = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if paths.cafile:
        with _unreadable_skipped("read the system CA store"):
            store.load_verify_locations(cafile=paths.cafile)
    if paths.capath:
        # OpenSSL consults the directory lazily, by subject hash; listing what a
        # lookup could find gives grpcio the same set.
        with _unreadable_skipped("read the system CA store"), os.scandir(paths.capath) as entries:
            for entry in entries:
                if _HASHED_NAME.match(entry.name):
                    with _unreadable_skipped("read the system CA store"):
                        store.load_verify_locations(cafile=entry.path)
    pem = "".join(ssl.DER_cert_to_PEM_cert(der) for der in store.get_ca_certs(binary_form=True))
    if not pem:
        raise ConfigurationError(
            f"TLSOptions: ca_cert is not set and the system CA store is empty (file "
            f"{paths.cafile or paths.openssl_cafile!r}, directory "
            f"{paths.capath or paths.openssl_capath!r}; SSL_CERT_FILE and SSL_CERT_DIR "
            f"override them): set TLSOptions(ca_cert=...) to the CA that signed the brokers"
        )
    return pem.encode("ascii")


@contextlib.contextmanager
def _unreadable_skipped(what: str) -> Iterator[None]:
    """Skip a CA file that does not load, unless for want of a file descriptor.

    Raises:
        LocalResourceError: the process has no file descriptor left (the store would
            otherwise read as empty: a ConfigurationError blaming the set-up).
    """
    try:
        yield
    except (ssl.SSLError, OSError) as exc:
        _refuse_if_out_of_descriptors(exc, what)


def _refuse_if_out_of_descriptors(error: OSError, what: str) -> None:
    """Raise a :class:`LocalResourceError` if ``error`` means that no file descriptor
    was left: this process's shortage, neither the broker's nor the set-up's.

    Raises:
        LocalResourceError: ``error`` is ``EMFILE`` or ``ENFILE``.
    """
    if error.errno in (errno.EMFILE, errno.ENFILE):
        raise LocalResourceError(
            f"cannot {what}: this process has no file descriptor left "
            f"({error.strerror or error}); close connections it no longer needs or raise "
            "its open-file limit (ulimit -n)"
        ) from error


class TLSSetup:
    """The roots, the ``ssl`` context and the grpc credentials of one client.

    Construction does no I/O; :meth:`context` and :meth:`channel_credentials` build on
    first use (the system store is read then) and return the same object afterwards.

    Thread-safe.
    """

    def __init__(self, options: TLSOptions) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._roots: bytes | None = None
        self._context: ssl.SSLContext | None = None
        self._credentials: grpc.ChannelCredentials | None = None

    def server_hostname(self, host: str) -> str:
        """The name to send (SNI) and to check the certificate against for ``host``."""
        return self.options.server_name or host

    def roots(self) -> bytes:
        """The trusted CA certificates as PEM (``ca_cert`` or the system store).

        Raises:
            ConfigurationError: no ``ca_cert`` and an empty system store.
            LocalResourceError: no file descriptor left to read the system store.
        """
        with self._lock:
            return self._roots_locked()

    def context(self) -> ssl.SSLContext:
        """The client ``ssl`` context (ALPN ``h2``), built once.

        Raises:
            ConfigurationError: the CA or the client certificate and key do not load.
            LocalResourceError: the process has no file descriptor left to read the
                system store or load the client certificate through (built again next
                time).
        """
        with self._lock:
            if self._context is None:
                self._context = self._build_context()
            return self._context

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """grpcio channel credentials from the same roots and identity, built once.

        Raises:
            ConfigurationError: no ``ca_cert`` and an empty system store.
            LocalResourceError: no file descriptor left to read the system store.
        """
        with self._lock:
            if self._credentials is None:
                tls = self.options
                self._credentials = grpc.ssl_channel_credentials(
                    root_certificates=self._roots_locked(),
                    private_key=_as_bytes(tls.client_key),
                    certificate_chain=_as_bytes(tls.client_cert),
                )
            return self._credentials

    def _roots_locked(self) -> bytes:
        if self._roots is None:
            ca = _as_bytes(self.options.ca_cert)
            self._roots = ca if ca is not None else system_roots()
        return self._roots

    def _build_context(self) -> ssl.SSLContext:
        roots = self._roots_locked()
        tls = self.options
        try:
            context = ssl.create_default_context(cadata=roots.decode("ascii"))
            cert, key = _as_bytes(tls.client_cert), _as_bytes(tls.client_key)
            if cert is not None and key is not None:
                with _memory_path(cert) as cert_path, _memory_path(key) as key_path:
                    # Without a callback OpenSSL asks for an encrypted key's passphrase
                    # on the terminal (blocking), or fails with a bare OSError.
                    context.load_cert_chain(cert_path, key_path, password=_no_passphrase)
        except (ssl.SSLError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"TLSOptions: the CA certificate or the client certificate and key do not "
                f"load (not PEM, or a key that does not match the certificate): {exc}"
            ) from None
        except OSError as exc:
            # The client certificate and key reach OpenSSL through an in-memory file,
            # which needs a descriptor: this process's shortage, not the broker's.
            _refuse_if_out_of_descriptors(exc, "load the TLS client certificate")
            raise
        context.set_alpn_protocols(["h2"])
        return context


def _no_passphrase() -> bytes:
    raise ConfigurationError(
        "TLSOptions: the client key is encrypted (it needs a passphrase, which "
        "TLSOptions has no field for): give it decrypted, e.g. `openssl pkey -in KEY "
        "-out PLAIN_KEY`, kept readable by this process only"
    )


def _as_bytes(value: bytes | str | os.PathLike[str] | None) -> bytes | None:
    # TLSOptions reads paths into bytes when it is built: a str left here is PEM text,
    # and a path cannot be left (its type admits one only as an argument).
    if isinstance(value, os.PathLike):
        raise ConfigurationError(f"TLSOptions holds a path it did not read: {value!r}")
    return value.encode() if isinstance(value, str) else value


def _fd_dir() -> str | None:
    return next((d for d in _FD_DIRS if os.path.isdir(d)), None)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def _memory_path(data: bytes) -> Iterator[str]:
    """A path that reads back ``data`` while the block runs, kept off any disk.

    Raises:
        ConfigurationError: ``data`` does not fit a pipe (platforms without memfd).
    """
    memfd_create = getattr(os, "memfd_create", None)
    fd_dir = _fd_dir()
    if memfd_create is not None and fd_dir is not None:
        fd = memfd_create("liftbridge-tls", getattr(os, "MFD_CLOEXEC", 0))
        try:
            _write_all(fd, data)
            yield f"{fd_dir}/{fd}"
        finally:
            os.close(fd)
        return
    if fd_dir is not None:
        read_end, write_end = os.pipe()
        try:
            os.set_blocking(write_end, False)
            try:
                _write_all(write_end, data)
            except BlockingIOError:
                raise ConfigurationError(
                    f"TLSOptions: the client certificate or key ({len(data)} bytes) is "
                    f"larger than a pipe holds"
                ) from None
            os.close(write_end)
            write_end = -1
            yield f"{fd_dir}/{read_end}"
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        return
    # No way to open a descriptor by path (Windows): a private file, removed at once.
    fd, path = tempfile.mkstemp(prefix="liftbridge-")
    try:
        _write_all(fd, data)
        os.close(fd)
        fd = -1
        yield path
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(path)


def peer_issuer(
    host: str, port: int, server_hostname: str, timeout: float, abort: DialAbort | None = None
) -> str | None:
    """The issuer the broker's certificate names, read without verifying anything.

    Only for an error message after verification failed (which CA to look for); the
    name is whatever the peer sent. ``None`` if it cannot be had.

    Raises:
        ClientClosedError: ``abort`` aborted (it abandons the connect and the handshake
            as it does the pre-flight's own).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with connect(host, port, timeout, abort) as raw:  # each step within timeout
            with context.wrap_socket(
                raw, server_hostname=server_hostname, do_handshake_on_connect=False
            ) as conn:
                with watching(abort, conn):
                    conn.do_handshake()
                der = conn.getpeercert(binary_form=True)
    except (OSError, LocalResourceError):
        return None  # no issuer to name: the error says what it can without it
    return certificate_issuer(der) if der else None


def _der_item(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER item at ``pos``."""
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def certificate_issuer(der: bytes) -> str | None:
    """The issuer of a DER certificate as ``"CN=..., O=..."`` (``None``: unreadable)."""
    try:
        _, pos, _ = _der_item(der, 0)  # Certificate
        _, pos, _ = _der_item(der, pos)  # TBSCertificate
        tag, _, end = _der_item(der, pos)
        if tag == 0xA0:  # [0] version
            pos = end
        for _ in range(2):  # serialNumber, signature
            _, _, pos = _der_item(der, pos)
        _, pos, name_end = _der_item(der, pos)  # issuer Name
        parts = []
        while pos < name_end:
            _, rdn, pos = _der_item(der, pos)  # RelativeDistinguishedName (SET)
            _, attribute, _ = _der_item(der, rdn)  # AttributeTypeAndValue
            _, oid_start, oid_end = _der_item(der, attribute)
            value_tag, value_start, value_end = _der_item(der, oid_end)
            label = _NAME_ATTRIBUTES.get(der[oid_start:oid_end])
            if label is not None:
                raw = der[value_start:value_end]
                value = raw.decode("utf-16-be" if value_tag == 0x1E else "utf-8", "replace")
                parts.append(f"{label}={value}")
    except (IndexError, ValueError):
        return None
    return ", ".join(parts) or None
