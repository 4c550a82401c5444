"""The settings of one client instance: a plain dataclass (no pydantic on the SDK's import path)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pymq.client.security import Security
from pymq.errors import ConfigError


@dataclass(slots=True)
class ClientConfig:
    """Settings shared by every producer and consumer of one client instance."""

    namesrv_addrs: list[str]
    #: the IP in the client id and in message ids (default: this host's outward IPv4)
    client_ip: str | None = None
    #: distinguishes client instances in one process (default: the pid)
    instance_name: str | None = None
    poll_namesrv_interval_seconds: float = 30.0
    #: a failed request (broker gone, or not the master: issue 32) refreshes the routes at once,
    #: at most once per this many seconds
    route_refresh_min_interval_seconds: float = 0.5
    heartbeat_interval_seconds: float = 30.0
    persist_offset_interval_seconds: float = 5.0
    rebalance_interval_seconds: float = 20.0
    rpc_timeout_seconds: float = 3.0
    #: credentials that sign every request (ACL); default: PYMQ_ACCESS_KEY / PYMQ_SECRET_KEY
    access_key: str | None = None
    secret_key: str | None = None
    #: TLS to nameservers and brokers (implied by a tls:// nameserver address)
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_check_hostname: bool = True
    #: over TLS with credentials: prove them once per connection (an ACL session) instead of signing
    #: each request; False signs each request there too (see pymq.security.session)
    acl_sessions: bool = True
    #: consumers pull from the slave a broker suggests (``suggestWhichBrokerId``) when they are far
    #: behind, and back from the master when it suggests so, as RocketMQ's always do
    follow_pull_suggestion: bool = True

    def __post_init__(self) -> None:
        if not self.namesrv_addrs:
            raise ConfigError("at least one nameserver address is required")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_seconds") and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise ConfigError(f"client option {f.name} must be a number greater than 0, got {value!r}")

    def security(self) -> Security:
        """Credentials and TLS options (see :mod:`pymq.client.security`)."""
        return Security(
            self.access_key,
            self.secret_key,
            self.tls,
            self.tls_ca_file,
            self.tls_cert_file,
            self.tls_key_file,
            self.tls_check_hostname,
            self.acl_sessions,
        )

    @classmethod
    def from_options(cls, namesrv_addrs: list[str], options: dict[str, Any]) -> ClientConfig:
        """The config from a producer's or consumer's leftover keyword options; unknown ones are errors."""
        known = {f.name for f in fields(cls)} - {"namesrv_addrs"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown client option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(namesrv_addrs, **options)
