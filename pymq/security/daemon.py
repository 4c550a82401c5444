"""The daemons' security wiring from their ``[acl]`` and ``[tls]`` settings (startup only).

Each function turns settings into what the transport takes, or None when the feature is
off; errors are :class:`~pymq.errors.ConfigError` (one line, exit code 2).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Mapping

from pymq.config import AclSettings, TlsSettings
from pymq.errors import ConfigError
from pymq.protocol.command import Command
from pymq.security.acl import AclFileError
from pymq.security.interceptor import AclInterceptor
from pymq.security.permissions import Resolver
from pymq.security.signing import Credentials, signer
from pymq.transport.tls import client_context, server_context, split_scheme


def acl_interceptor(
    settings: AclSettings, server: str, resolvers: Mapping[int, Resolver] | None = None
) -> AclInterceptor | None:
    """The ACL interceptor when ``acl.enable`` (the file must load), else None; ``resolvers``: the
    server's per-code finders of fields a request may leave out (see :mod:`pymq.security.permissions`)."""
    if not settings.enable:
        return None
    assert settings.file is not None  # the settings' validator requires it
    try:
        return AclInterceptor(
            settings.file,
            replay_window_seconds=settings.replay_window_seconds,
            replay_cache_entries=settings.replay_cache_entries,
            server=server,
            resolvers=resolvers,
        )
    except AclFileError as exc:
        raise ConfigError(str(exc)) from exc


def daemon_signer(settings: AclSettings) -> Callable[[Command], None] | None:
    """Signs this daemon's own requests (registration, replication) when it has credentials."""
    if settings.access_key is None or settings.secret_key is None:
        return None
    try:
        return signer(Credentials(settings.access_key, settings.secret_key))
    except ValueError as exc:
        raise ConfigError(f"acl credentials: {exc}") from exc


def listener_tls(settings: TlsSettings) -> ssl.SSLContext | None:
    """The listener's TLS context when ``tls.enable``, else None."""
    if not settings.enable:
        return None
    assert settings.cert_file is not None
    return server_context(
        settings.cert_file, settings.key_file, ca_file=settings.ca_file, verify_client=settings.verify_client
    )


def outgoing_tls(settings: TlsSettings, addrs: Iterable[str] = ()) -> ssl.SSLContext | None:
    """TLS for this daemon's outgoing connections: when ``tls.client`` or any address is ``tls://``."""
    if not settings.client and not any(split_scheme(a)[1] for a in addrs):
        return None
    return client_context(
        ca_file=settings.ca_file,
        cert_file=settings.client_cert_file,
        key_file=settings.client_key_file,
        check_hostname=settings.check_hostname,
    )
