"""Client credentials and TLS: what every SDK entry point (producers, consumers, admin, readers) takes.

Options (keyword arguments, also fields of :class:`~pymq.client.client_config.ClientConfig`):
``access_key``/``secret_key`` (default: the ``PYMQ_ACCESS_KEY``/``PYMQ_SECRET_KEY``
environment variables) sign every request (over TLS: once per connection, see
:mod:`pymq.security.session`; ``acl_sessions=False`` signs each request there too); ``tls=True`` (implied by a ``tls://``
nameserver address) connects to nameservers and brokers over TLS, verifying them with
``tls_ca_file`` (default: the system CAs), presenting ``tls_cert_file``/``tls_key_file``
when the servers require client certificates.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pymq.errors import ConfigError
from pymq.protocol.command import Command
from pymq.security.session import open_session
from pymq.security.signing import Credentials, signer
from pymq.transport.tls import client_context, split_scheme

ENV_ACCESS_KEY = "PYMQ_ACCESS_KEY"
ENV_SECRET_KEY = "PYMQ_SECRET_KEY"


@dataclass(frozen=True, slots=True)
class Security:
    """Credentials and TLS options of one client."""

    access_key: str | None = None
    secret_key: str | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_check_hostname: bool = True
    #: over TLS, prove the credentials once per connection instead of signing each request
    acl_sessions: bool = True

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Security:
        try:
            return cls(**options)
        except TypeError as exc:
            known = ", ".join(cls.__slots__)
            raise ConfigError(f"unknown security option(s) in {sorted(options)}; known: {known}") from exc

    def credentials(self) -> Credentials | None:
        """The explicit keys, else the environment's; None when there are none."""
        ak, sk = self.access_key, self.secret_key
        if ak is None and sk is None:
            ak, sk = os.environ.get(ENV_ACCESS_KEY) or None, os.environ.get(ENV_SECRET_KEY) or None
            if ak is None and sk is None:
                return None
            where = f"the environment ({ENV_ACCESS_KEY}, {ENV_SECRET_KEY})"
        else:
            where = "access_key and secret_key"
        if not ak or not sk:
            raise ConfigError(f"{where}: give both the access key and the secret key")
        return Credentials(ak, sk)

    def signer(self) -> Callable[[Command], None] | None:
        creds = self.credentials()
        return signer(creds) if creds is not None else None

    def ssl_context(self, addrs: Iterable[str] = ()) -> ssl.SSLContext | None:
        """TLS when asked for, or when any nameserver address is ``tls://``."""
        if not self.tls and not any(split_scheme(a)[1] for a in addrs):
            return None
        return client_context(
            ca_file=self.tls_ca_file,
            cert_file=self.tls_cert_file,
            key_file=self.tls_key_file,
            check_hostname=self.tls_check_hostname,
        )

    def rpc_options(self, addrs: Iterable[str] = ()) -> dict[str, Any]:
        """``ssl``, ``signer`` and ``session`` for :class:`~pymq.transport.client.RpcClient`: with
        credentials, each TLS connection opens an ACL session (its requests then go unsigned) unless
        ``acl_sessions`` is False; a plaintext one, or one to a server without sessions, signs each."""
        sign = self.signer()
        session = open_session if sign is not None and self.acl_sessions else None
        return {"ssl": self.ssl_context(addrs), "signer": sign, "session": session}


SECURITY_OPTIONS = frozenset(Security.__slots__)
