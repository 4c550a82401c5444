"""TLS contexts for listeners and connectors (stdlib ``ssl``; nothing here opens a socket).

``server_context`` serves a certificate and optionally requires client certificates signed
by a CA; ``client_context`` verifies the server against a CA file (the system's CAs when
none is given) and optionally presents a client certificate. Every listener (broker,
nameserver, the HA replication link) and connector takes the resulting ``ssl.SSLContext``.

Clients name a TLS peer ``tls://host:port`` (or set a TLS flag in their config); the
broker addresses a nameserver hands out carry no scheme, so a client that reaches its
nameservers over TLS reaches the brokers over TLS too.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from pymq.errors import ConfigError

TLS_SCHEME = "tls://"


def split_scheme(addr: str) -> tuple[str, bool]:
    """``"tls://h:p"`` -> ``("h:p", True)``; ``"h:p"`` -> ``("h:p", False)``."""
    if addr.startswith(TLS_SCHEME):
        return addr[len(TLS_SCHEME) :], True
    return addr, False


def _load_chain(ctx: ssl.SSLContext, cert_file: str | Path, key_file: str | Path | None, what: str) -> None:
    try:
        ctx.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    except FileNotFoundError as exc:
        files = f"{cert_file}" + (f" / {key_file}" if key_file else "")
        raise ConfigError(f"{what} certificate or key file not found: {files}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot use {what} certificate {cert_file}: {exc}") from exc


def _load_ca(ctx: ssl.SSLContext, ca_file: str | Path, what: str) -> None:
    try:
        ctx.load_verify_locations(cafile=str(ca_file))
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} CA file not found: {ca_file}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot use {what} CA file {ca_file}: {exc}") from exc


def server_context(
    cert_file: str | Path,
    key_file: str | Path | None = None,
    *,
    ca_file: str | Path | None = None,
    verify_client: bool = False,
) -> ssl.SSLContext:
    """A listener's context: serve ``cert_file``; with ``verify_client`` require a client
    certificate signed by ``ca_file``. TLS 1.2 at least."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cert_file, key_file, "server")
    if verify_client:
        if ca_file is None:
            raise ConfigError("client certificate verification needs a CA file (tls.ca_file)")
        _load_ca(ctx, ca_file, "client")
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif ca_file is not None:
        _load_ca(ctx, ca_file, "client")
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def client_context(
    *,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A connector's context: verify the server by ``ca_file`` (default: the system CAs) and
    its name or IP (unless ``check_hostname`` is False); present ``cert_file`` if given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is not None:
        _load_ca(ctx, ca_file, "server")
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = check_hostname
    if cert_file is not None:
        _load_chain(ctx, cert_file, key_file, "client")
    return ctx
