"""Finding this host's address."""

from __future__ import annotations

import socket

_LOCAL_IP: str | None = None


def local_ip() -> str:
    """This host's outward IPv4 address (no packet is sent); 127.0.0.1 if there is none."""
    global _LOCAL_IP
    if _LOCAL_IP is None:
        ip = "127.0.0.1"
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(("10.255.255.255", 1))
                ip = s.getsockname()[0]
        except OSError:
            pass
        _LOCAL_IP = ip
    return _LOCAL_IP
