"""Trusting exactly one self-signed certificate: the one `launcher api deploy` made on
the server's VM (fetched over SSH), or the one whose fingerprint `launcher api login
--tls-fingerprint` was given.

`pinned_context(pem, fingerprint)` is the SSL context the client's HTTP transport uses:
it trusts that certificate alone as its root (no system CA), skips the host name check
(a VM's address changes; the certificate names no host), and after every handshake
compares the SHA-256 of the certificate the server presented with the pinned one,
refusing the connection (`PinMismatchError`) when they differ.
"""

from __future__ import annotations

import hashlib
import ssl
from typing import Any
from urllib.parse import urlsplit

from launcher.errors import LauncherError


class PinMismatchError(ssl.SSLError):
    """The server presented a certificate other than the pinned one."""


def fingerprint_of_pem(pem: str) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


def normalize_fingerprint(text: str) -> str:
    """Hex, lower case, no colons or `SHA256:` prefix; raises LauncherError otherwise."""
    fp = text.strip().lower().removeprefix("sha256:").replace(":", "")
    if len(fp) != 64 or any(c not in "0123456789abcdef" for c in fp):
        raise LauncherError(f"--tls-fingerprint {text!r}: give the certificate's SHA-256 as 64 "
                            "hex digits (what `launcher api deploy` printed).")
    return fp


class _PinnedContext(ssl.SSLContext):
    pin: str

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        sock = super().wrap_socket(*args, **kwargs)
        der = sock.getpeercert(binary_form=True) or b""
        got = hashlib.sha256(der).hexdigest()
        if got != self.pin:
            sock.close()
            raise PinMismatchError(f"the server's certificate (SHA-256 {got}) is not the "
                                   f"pinned one ({self.pin})")
        return sock


def pinned_context(cert_pem: str, fingerprint: str) -> ssl.SSLContext:
    """An SSL context that trusts `cert_pem` alone and checks its fingerprint."""
    if fingerprint_of_pem(cert_pem) != fingerprint:
        raise LauncherError("The stored server certificate does not match its stored "
                            "fingerprint; log in again (`launcher api login`).")
    ctx = _PinnedContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.pin = fingerprint
    ctx.check_hostname = False  # the pin names the server, not a host name
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=cert_pem)
    return ctx


def fetch_certificate(url: str, expected: str, timeout: float = 10.0) -> str:
    """The PEM certificate the HTTPS server at `url` presents, when its SHA-256 is
    `expected` (hex). Raises LauncherError when it cannot be reached or differs."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise LauncherError(f"--tls-fingerprint needs an https:// endpoint, not {url}.")
    try:
        pem = ssl.get_server_certificate((parts.hostname, parts.port or 443), timeout=timeout)
    except OSError as exc:
        raise LauncherError(f"Cannot reach {url} to read its certificate ({exc}).") from None
    got = fingerprint_of_pem(pem)
    if got != expected:
        raise LauncherError(f"The server at {url} presents a certificate with SHA-256 {got}, "
                            f"not the {expected} you gave: refusing to log in (a different "
                            "server, or someone in between).")
    return pem
