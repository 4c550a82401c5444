"""Security settings: [acl]/[tls] validation, client credentials and TLS options, daemon flags, TLS contexts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from pymq.cli.security_options import daemon_security_overrides
from pymq.client.client_config import ClientConfig
from pymq.client.security import Security
from pymq.config import BrokerConfig, NamesrvConfig, load_config
from pymq.errors import ConfigError
from pymq.security.daemon import daemon_signer, outgoing_tls
from pymq.transport.client import split_addr
from pymq.transport.tls import client_context, server_context, split_scheme


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PYMQ_ACL__ENABLE": "true"}, "acl.enable needs acl.file"),
        ({"PYMQ_ACL__ACCESS_KEY": "b"}, "go together"),
        ({"PYMQ_TLS__ENABLE": "true"}, "tls.enable needs tls.cert_file"),
        ({"PYMQ_TLS__VERIFY_CLIENT": "true", "PYMQ_TLS__ENABLE": "1", "PYMQ_TLS__CERT_FILE": "c"}, "needs tls.ca_file"),
    ],
)
def test_invalid_security_settings_are_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(BrokerConfig, env=env)


def test_security_settings_from_env_and_toml(tmp_path: Path) -> None:
    toml = tmp_path / "ns.toml"
    toml.write_text('[acl]\nenable = true\nfile = "acl.toml"\nreplay_window_seconds = 30\n[tls]\nclient = true\n')
    cfg = load_config(NamesrvConfig, toml, env={"PYMQ_ACL__RELOAD_INTERVAL_SECONDS": "2"})
    assert cfg.acl.enable and cfg.acl.file == Path("acl.toml") and cfg.acl.replay_window_seconds == 30
    assert cfg.acl.reload_interval_seconds == 2 and cfg.tls.client and not cfg.tls.enable
    broker = load_config(BrokerConfig, env={"PYMQ_ACL__ACCESS_KEY": "b", "PYMQ_ACL__SECRET_KEY": "b-secret"})
    assert daemon_signer(broker.acl) is not None and daemon_signer(BrokerConfig().acl) is None
    assert outgoing_tls(broker.tls, ["127.0.0.1:9876"]) is None
    assert outgoing_tls(broker.tls, ["tls://127.0.0.1:9876"]) is not None


def test_client_credentials_from_arguments_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("PYMQ_SECRET_KEY", raising=False)
    assert Security().credentials() is None and Security().signer() is None
    creds = ClientConfig(["h:1"], access_key="app", secret_key="app-secret").security().credentials()
    assert creds is not None and creds.access_key == "app"
    monkeypatch.setenv("PYMQ_ACCESS_KEY", "env-app")
    monkeypatch.setenv("PYMQ_SECRET_KEY", "env-secret")
    env_creds = Security().credentials()
    assert env_creds is not None and env_creds.access_key == "env-app"
    with pytest.raises(ConfigError, match="give both"):
        Security(access_key="app").credentials()
    with pytest.raises(ConfigError, match="unknown security option"):
        Security.from_options({"acess_key": "x"})
    with pytest.raises(ConfigError, match="unknown client option"):
        ClientConfig.from_options(["h:1"], {"secret": "x"})


def test_tls_addresses_and_contexts(tmp_path: Path) -> None:
    assert split_scheme("tls://h:1") == ("h:1", True) and split_scheme("h:1") == ("h:1", False)
    assert split_addr("tls://10.0.0.1:9876") == ("10.0.0.1", 9876)
    assert Security().ssl_context(["h:1"]) is None
    assert Security().ssl_context(["tls://h:1"]) is not None
    assert not client_context(check_hostname=False).check_hostname
    with pytest.raises(ConfigError, match="certificate or key file not found"):
        server_context(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match="CA file not found"):
        client_context(ca_file=tmp_path / "missing-ca.pem")
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="cannot use server certificate"):
        server_context(bad)


def test_daemon_flags_become_config_overrides() -> None:
    flags = {"acl_file": "acl.toml", "tls_cert_file": "c.pem", "tls_key_file": "k.pem", "port": 1}
    assert daemon_security_overrides(flags) == {
        "acl": {"enable": True, "file": "acl.toml"},
        "tls": {"enable": True, "cert_file": "c.pem", "key_file": "k.pem"},
    }
    assert flags == {"port": 1}
    with pytest.raises(click.BadParameter):
        daemon_security_overrides({"tls_key_file": "k.pem"})


@pytest.mark.integration
def test_unusable_acl_file_stops_the_daemon_with_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "acl.toml"
    bad.write_text('[[accounts]]\naccess_key = "a"\n')
    out = subprocess.run(
        [sys.executable, "-m", "pymq.cli.namesrv", "--port", "0", "--acl-file", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "access_key and secret_key" in out.stdout + out.stderr
