"""The ACL file's model, as RocketMQ's plain ACL: accounts, permissions, white remote addresses.

An ACL file (TOML)::

    global_white_remote_addresses = ["10.0.0.0/8", "192.168.1.*"]

    [[accounts]]
    access_key = "app"
    secret_key = "app-secret-1"
    white_remote_address = "192.168.0.*"     # optional: requests from here need no signature
    admin = false                            # admin requests (create topic, broker config ...)
    default_topic_perm = "DENY"              # for topics not listed below (default DENY)
    default_group_perm = "SUB"               # for groups not listed below (default DENY)
    topic_perms = { orders = "PUB|SUB", audit = "SUB" }   # or ["orders=PUB|SUB", "audit=SUB"]
    group_perms = { billing = "SUB" }

Permissions are RocketMQ's: ``DENY``, ``PUB``, ``SUB``, ``PUB|SUB`` (``ANY`` as a need: PUB or
SUB). Pure logic: parsing and decisions, no I/O beyond reading the file.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DENY = 1
ANY = 2
PUB = 4
SUB = 8
_PERM_NAMES = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}


class AclFileError(ValueError):
    """The ACL file cannot be used (the message says where)."""


def parse_perm(text: str, where: str) -> int:
    perm = _PERM_NAMES.get(str(text).replace(" ", "").upper())
    if perm is None:
        raise AclFileError(f"{where}: permission must be DENY, PUB, SUB or PUB|SUB, got {text!r}")
    return perm


def allows(needed: int, owned: int) -> bool:
    """RocketMQ's Permission.checkPermission: DENY wins; ANY needs PUB or SUB."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return (needed & owned) == needed


# --- remote address patterns -------------------------------------------------------------------------

_OCTET_RANGE = re.compile(r"(\d{1,3})-(\d{1,3})")


def _octet_matcher(part: str, where: str) -> Callable[[int], bool]:
    if part == "*":
        return lambda _v: True
    if part.startswith("{") and part.endswith("}"):
        values = {int(v) for v in part[1:-1].split(",") if v.strip().isdigit()}
        if not values:
            raise AclFileError(f"{where}: bad address set {part!r}")
        return values.__contains__
    m = _OCTET_RANGE.fullmatch(part)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        return lambda v: lo <= v <= hi
    if part.isdigit() and int(part) <= 255:
        n = int(part)
        return lambda v: v == n
    raise AclFileError(f"{where}: bad address part {part!r}")


def address_matcher(pattern: str, where: str) -> Callable[[str], bool]:
    """A predicate on IPv4 text for one RocketMQ-style pattern: ``*``, an IP, a CIDR block,
    or dotted parts each ``*``, ``n``, ``a-b`` or ``{a,b}`` (``192.168.*`` covers the rest)."""
    pattern = pattern.strip()
    if pattern in ("*", "*.*.*.*"):
        return lambda _ip: True
    if "/" in pattern:
        try:
            net = ipaddress.ip_network(pattern, strict=False)
        except ValueError as exc:
            raise AclFileError(f"{where}: bad address block {pattern!r}") from exc

        def in_net(ip: str) -> bool:
            try:
                return ipaddress.ip_address(ip) in net
            except ValueError:
                return False

        return in_net
    parts = pattern.split(".")
    if not 1 <= len(parts) <= 4 or not pattern:
        raise AclFileError(f"{where}: bad address pattern {pattern!r}")
    if len(parts) < 4:
        if parts[-1] != "*":
            raise AclFileError(f"{where}: bad address pattern {pattern!r}")
        parts += ["*"] * (4 - len(parts))
    octets = [_octet_matcher(p, where) for p in parts]

    def match(ip: str) -> bool:
        values = ip.split(".")
        if len(values) != 4 or not all(v.isdigit() for v in values):
            return False
        return all(m(int(v)) for m, v in zip(octets, values, strict=True))

    return match


def _matchers(value: Any, where: str) -> tuple[Callable[[str], bool], ...]:
    if value is None or value == "":
        return ()
    items = value if isinstance(value, list) else [value]
    return tuple(address_matcher(str(p), where) for p in items if str(p).strip())


def _patterns(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value] if value else []
    return tuple(str(p).strip() for p in items if str(p).strip())


# --- accounts ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)
    white_remote: tuple[Callable[[str], bool], ...] = ()
    #: ``white_remote`` as the file writes it (shown and edited by the dashboard)
    white_remote_patterns: tuple[str, ...] = ()

    def topic_perm(self, topic: str) -> int:
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> int:
        return self.group_perms.get(group, self.default_group_perm)

    def is_white(self, ip: str) -> bool:
        return any(m(ip) for m in self.white_remote)

    def __repr__(self) -> str:  # never print the secret
        return f"Account(access_key={self.access_key!r}, admin={self.admin})"


@dataclass(frozen=True, slots=True)
class AclConfig:
    accounts: dict[str, Account]
    global_white: tuple[Callable[[str], bool], ...] = ()

    def is_globally_white(self, ip: str) -> bool:
        return any(m(ip) for m in self.global_white)

    def describe(self) -> list[dict[str, Any]]:
        """Every account's rights for display (GET_ACL_ACCOUNTS): never its secret key."""
        return [
            {
                "accessKey": a.access_key,
                "admin": a.admin,
                "defaultTopicPerm": perm_name(a.default_topic_perm),
                "defaultGroupPerm": perm_name(a.default_group_perm),
                "topicPerms": {k: perm_name(v) for k, v in sorted(a.topic_perms.items())},
                "groupPerms": {k: perm_name(v) for k, v in sorted(a.group_perms.items())},
                "whiteRemoteAddresses": len(a.white_remote),
                "whiteRemoteAddress": list(a.white_remote_patterns),
            }
            for _, a in sorted(self.accounts.items())
        ]


def perm_name(perm: int) -> str:
    """A permission as the ACL file writes it (DENY, PUB, SUB, PUB|SUB)."""
    if perm & DENY:
        return "DENY"
    return "|".join(n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit) or "DENY"


def _perm_table(value: Any, where: str) -> dict[str, int]:
    """``{name = "PUB"}`` or RocketMQ's ``["name=PUB", ...]``."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): parse_perm(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        out = {}
        for item in value:
            name, sep, perm = str(item).partition("=")
            if not sep or not name.strip():
                raise AclFileError(f"{where}: entry {item!r} must be name=PERM")
            out[name.strip()] = parse_perm(perm, f"{where}.{name.strip()}")
        return out
    raise AclFileError(f"{where}: must be a table or a list of name=PERM")


_ACCOUNT_KEYS = {
    "access_key",
    "secret_key",
    "admin",
    "default_topic_perm",
    "default_group_perm",
    "topic_perms",
    "group_perms",
    "white_remote_address",
}


def parse_acl(data: dict[str, Any]) -> AclConfig:
    """The ACL from a parsed TOML document; AclFileError names the bad entry."""
    unknown = set(data) - {"global_white_remote_addresses", "accounts"}
    if unknown:
        raise AclFileError(f"unknown key(s) {', '.join(sorted(unknown))}")
    accounts: dict[str, Account] = {}
    raw_accounts = data.get("accounts", [])
    if not isinstance(raw_accounts, list):
        raise AclFileError("accounts must be an array of tables ([[accounts]])")
    for i, raw in enumerate(raw_accounts):
        where = f"accounts[{i}]"
        if not isinstance(raw, dict):
            raise AclFileError(f"{where}: must be a table")
        bad = set(raw) - _ACCOUNT_KEYS
        if bad:
            raise AclFileError(f"{where}: unknown key(s) {', '.join(sorted(bad))}")
        ak, sk = raw.get("access_key"), raw.get("secret_key")
        if not isinstance(ak, str) or not ak or not isinstance(sk, str) or not sk:
            raise AclFileError(f"{where}: access_key and secret_key must be non-empty strings")
        if len(sk) < 6:
            raise AclFileError(f"{where}: secret_key must be at least 6 characters")
        if ak in accounts:
            raise AclFileError(f"{where}: access_key {ak!r} appears twice")
        admin = raw.get("admin", False)
        if not isinstance(admin, bool):
            raise AclFileError(f"{where}.admin: must be true or false")
        accounts[ak] = Account(
            access_key=ak,
            secret_key=sk,
            admin=admin,
            default_topic_perm=parse_perm(raw.get("default_topic_perm", "DENY"), f"{where}.default_topic_perm"),
            default_group_perm=parse_perm(raw.get("default_group_perm", "DENY"), f"{where}.default_group_perm"),
            topic_perms=_perm_table(raw.get("topic_perms"), f"{where}.topic_perms"),
            group_perms=_perm_table(raw.get("group_perms"), f"{where}.group_perms"),
            white_remote=_matchers(raw.get("white_remote_address"), f"{where}.white_remote_address"),
            white_remote_patterns=_patterns(raw.get("white_remote_address")),
        )
    white = _matchers(data.get("global_white_remote_addresses"), "global_white_remote_addresses")
    return AclConfig(accounts, white)


def load_acl(path: str | Path) -> AclConfig:
    """Read and parse an ACL file; AclFileError says why it cannot be used."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as exc:
        raise AclFileError(f"ACL file not found: {path}") from exc
    except OSError as exc:
        raise AclFileError(f"cannot read ACL file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise AclFileError(f"ACL file {path} is not valid TOML: {exc}") from exc
    try:
        return parse_acl(data)
    except AclFileError as exc:
        raise AclFileError(f"ACL file {path}: {exc}") from exc
