"""A throwaway CA and server certificate (127.0.0.1, localhost) for ``pymq-bench --embedded --tls``,
made with the ``openssl`` command (no new dependency; benchmarks only)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pymq.errors import ConfigError


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_server_certs(d: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key) in ``d``; ConfigError if openssl is missing or fails."""
    if shutil.which("openssl") is None:
        raise ConfigError("--embedded --tls needs the openssl command to make a throwaway certificate")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    try:
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                 "-subj", "/CN=pymq-bench-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign", cwd=d)  # fmt: skip
        _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=pymq-bench", cwd=d)
        (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)  # fmt: skip
    except subprocess.CalledProcessError as exc:
        why = exc.stderr.decode(errors="replace")
        raise ConfigError(f"openssl failed making a throwaway certificate: {why}") from exc
    return d / "ca.pem", d / "server.pem", d / "server.key"
