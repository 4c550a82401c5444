"""Credential and TLS options shared by pymq-admin and pymq-bench (see pymq.client.security)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

#: the keyword arguments these options become (AdminClient, producers, consumers take them)
SECURITY_PARAMS = (
    "access_key",
    "secret_key",
    "tls",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_check_hostname",
    "acl_sessions",
)


def security_options(store: dict[str, Any] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add --access-key/--secret-key (env PYMQ_ACCESS_KEY/PYMQ_SECRET_KEY) and the --tls options.

    With ``store``, the values go into that dict (as client keyword options) instead of
    the command's parameters."""

    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if store is not None and value is not None and param.name is not None:
            store[param.name] = value
        return value

    extra: dict[str, Any] = {"callback": keep, "expose_value": False} if store is not None else {}

    def add(f: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option(
                "--access-key",
                envvar="PYMQ_ACCESS_KEY",
                default=None,
                help="ACL access key (env PYMQ_ACCESS_KEY).",
                **extra,
            ),
            click.option(
                "--secret-key",
                envvar="PYMQ_SECRET_KEY",
                default=None,
                help="ACL secret key (env PYMQ_SECRET_KEY).",
                **extra,
            ),
            click.option(
                "--tls", is_flag=True, help="Connect over TLS (implied by tls:// nameserver addresses).", **extra
            ),
            click.option(
                "--tls-ca-file", default=None, help="CA file verifying the servers (default: system CAs).", **extra
            ),
            click.option(
                "--tls-cert-file", default=None, help="Client certificate, when servers require one.", **extra
            ),
            click.option("--tls-key-file", default=None, help="Key of the client certificate.", **extra),
            click.option(
                "--tls-check-hostname/--tls-no-check-hostname",
                default=True,
                show_default=True,
                help="Check that server certificates name the host connected to.",
                **extra,
            ),
            click.option(
                "--acl-sessions/--no-acl-sessions",
                default=True,
                show_default=True,
                help="Over TLS, prove the credentials once per connection instead of signing every request.",
                **extra,
            ),
        ]
        for option in reversed(options):
            f = option(f)
        return f

    return add


def security_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """Pop the security options out of a command's keyword arguments (None values left out)."""
    return {k: v for k in SECURITY_PARAMS if (v := options.pop(k, None)) is not None}


def daemon_security_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--acl-file (turns ACL on) and --tls-cert-file/--tls-key-file (turn TLS on) for the daemons;
    everything else is in the [acl] and [tls] tables of the config file (or PYMQ_ACL__*/PYMQ_TLS__*)."""
    f = click.option("--tls-key-file", default=None, help="Key of --tls-cert-file.")(f)
    f = click.option(
        "--tls-cert-file", default=None, help="Serve TLS with this certificate ([tls] in the config file for the rest)."
    )(f)
    f = click.option("--acl-file", default=None, help="Enforce this ACL file (TOML; re-read when it changes).")(f)
    return f


def daemon_security_overrides(flags: dict[str, Any]) -> dict[str, Any]:
    """Pop the daemon security flags out of ``flags`` as config overrides ({"acl": ..., "tls": ...})."""
    out: dict[str, Any] = {}
    acl_file = flags.pop("acl_file", None)
    cert, key = flags.pop("tls_cert_file", None), flags.pop("tls_key_file", None)
    if acl_file:
        out["acl"] = {"enable": True, "file": acl_file}
    if cert:
        out["tls"] = {"enable": True, "cert_file": cert, **({"key_file": key} if key else {})}
    elif key:
        raise click.BadParameter("--tls-key-file needs --tls-cert-file", param_hint="--tls-key-file")
    return out
