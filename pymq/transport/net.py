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


def advertised_host(advertised: str | None, bind_host: str) -> str:
    """The host a server tells others to reach it at: ``advertised`` if set, else the host it
    binds, or this host's address when it binds every interface."""
    if advertised:
        return advertised
    return local_ip() if bind_host in ("0.0.0.0", "") else bind_host
