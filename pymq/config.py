"""Validated settings for the nameserver, the broker and its store.

Sources, later ones winning: defaults < TOML file < ``PYMQ_*`` environment variables <
command-line flags. Nested fields use a double underscore in the environment
(``PYMQ_STORE__FLUSH_DISK_TYPE=SYNC_FLUSH``); list fields take ``;``- or ``,``-separated
values (``PYMQ_NAMESRV_ADDRS=10.0.0.1:9876;10.0.0.2:9876``).
"""

from __future__ import annotations

import difflib
import os
import tomllib
import typing
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from pymq.errors import ConfigError

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 10s 1m"`` -> delays in ms; level L is ``result[L - 1]``."""
    out = []
    for token in spec.split():
        for unit in ("ms", "s", "m", "h", "d"):
            if token.endswith(unit) and token[: -len(unit)].replace(".", "", 1).isdigit():
                out.append(int(float(token[: -len(unit)]) * _UNITS_MS[unit]))
                break
        else:
            raise ValueError(f"bad delay level {token!r}: use a number with a unit of ms, s, m, h or d")
    if not out:
        raise ValueError("at least one delay level is required")
    return out


#: Store file sizes for development and tests: 32 MiB commitlog, 2 MiB consume-queue, 8 MiB index files.
SMALL_STORE_SIZES = {
    "commitlog_file_size": 32 * 1024 * 1024,
    "consume_queue_file_entries": 100_000,
    "index_hash_slots": 100_000,
    "index_max_entries": 400_000,
}


class FlushDiskType(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=False)


# --- security (issue 20): ACL and TLS settings shared by both daemons ------------------------------


class AclSettings(_Model):
    """``[acl]``: RocketMQ-style access control (see docs/security.md)."""

    #: check every request's signature and permissions (off: no cost at all)
    enable: bool = False
    #: the ACL file (TOML: accounts, permissions, white addresses); re-read when it changes
    file: Path | None = None
    #: a request's timestamp may differ from this daemon's clock by at most this much
    replay_window_seconds: float = Field(60.0, gt=0)
    #: signatures remembered to refuse replays (bounds memory; see security.signing.ReplayGuard)
    replay_cache_entries: int = Field(1_000_000, ge=2)
    #: how often the file's modification time is checked
    reload_interval_seconds: float = Field(5.0, gt=0)
    #: credentials this daemon signs its own requests with (broker -> nameserver registration,
    #: slave -> master replication)
    access_key: str | None = None
    secret_key: str | None = None

    @model_validator(mode="after")
    def _check(self) -> AclSettings:
        if self.enable and self.file is None:
            raise ValueError("acl.enable needs acl.file (the ACL file)")
        if (self.access_key is None) != (self.secret_key is None):
            raise ValueError("acl.access_key and acl.secret_key go together")
        return self


class TlsSettings(_Model):
    """``[tls]``: TLS on this daemon's listener, and for its own outgoing connections."""

    #: serve TLS only on the listening port (plaintext clients are refused)
    enable: bool = False
    cert_file: Path | None = None
    key_file: Path | None = None
    #: CA that signs client certificates (listener) and that verifies peers this daemon calls
    ca_file: Path | None = None
    #: require a client certificate signed by ca_file
    verify_client: bool = False
    #: connect to nameservers / the master over TLS (also implied by tls:// addresses)
    client: bool = False
    #: a certificate this daemon presents when it connects out (mutual TLS)
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    #: check that the peer's certificate names the host or IP connected to
    check_hostname: bool = True
    #: the metrics endpoint serves HTTPS with the listener's certificate (and client-certificate rule)
    metrics: bool = False

    @model_validator(mode="after")
    def _check(self) -> TlsSettings:
        if self.enable and self.cert_file is None:
            raise ValueError("tls.enable needs tls.cert_file (and tls.key_file unless the cert file holds the key)")
        if self.verify_client and self.ca_file is None:
            raise ValueError("tls.verify_client needs tls.ca_file")
        if self.metrics and not self.enable:
            raise ValueError("tls.metrics needs tls.enable (the metrics endpoint uses the listener's certificate)")
        return self


def check_namesrv_addrs(v: list[str]) -> list[str]:
    """Every nameserver address is host:port (the daemons' and front ends' ``namesrv_addrs``)."""
    for a in v:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"nameserver address {a!r} must be host:port")
    return v


class NamesrvConfig(_Model):
    """``pymq-namesrv`` settings."""

    host: str = "0.0.0.0"
    port: int = Field(9876, ge=0, le=65535)
    #: brokers silent for longer than this are dropped from the routes
    broker_expiry_seconds: float = Field(120.0, gt=0)
    scan_interval_seconds: float = Field(10.0, gt=0)
    metrics_port: int | None = Field(None, ge=0, le=65535)
    log_level: str = "info"
    #: close a connection that sent nothing for this long and has no request in flight (0: never)
    idle_timeout_seconds: float = Field(120.0, ge=0)
    #: close a connection whose frame, once begun, is not complete within this time (0: never)
    frame_read_timeout_seconds: float = Field(60.0, ge=0)
    #: bytes all connections may hold in unfinished frames; past it, large new frames are refused (0: no cap)
    max_partial_frame_bytes: int = Field(128 * 1024 * 1024, ge=0)
    #: access control and TLS (issue 20; see docs/security.md)
    acl: AclSettings = Field(default_factory=AclSettings)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    # --- failover controller (issue 32; docs/REPLICATION.md "Automatic failover") ---
    #: "embedded": this nameserver runs the controller, its state in ``controller_dir`` (one controller);
    #: "etcd": its state in etcd (``controller_etcd_endpoints``), each change compared on revision;
    #: every such nameserver runs a controller, one active (campaign in etcd), the others standby
    controller: Literal["off", "embedded", "etcd"] = "off"
    controller_dir: Path = Path("./controller")
    controller_etcd_endpoints: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:2379"], min_length=1)
    controller_etcd_key: str = "/pymq/controller/state"
    #: the key the controllers campaign for (bound to the active one's etcd lease)
    controller_etcd_leader_key: str = "/pymq/controller/leader"
    #: TTL of the active controller's etcd lease: a dead active controller is replaced after about
    #: this long (etcd raises a TTL below its minimum, 1.5 x its election timeout: 2 s by default)
    controller_etcd_lease_seconds: int = Field(5, ge=1, le=300)
    #: the address a standby names as the active controller (default: this nameserver's host:port)
    controller_address: str | None = None
    #: a master silent this long is replaced by an election
    controller_master_timeout_seconds: float = Field(3.0, gt=0)
    #: how long a master holds its mastership after a heartbeat it sent (must be < the timeout)
    controller_lease_seconds: float = Field(2.0, gt=0)
    #: elect a replica outside the sync-state set when none in it is alive (may lose writes)
    controller_unclean_election: bool = False

    @model_validator(mode="after")
    def _lease_below_timeout(self) -> NamesrvConfig:
        if self.controller_lease_seconds >= self.controller_master_timeout_seconds:
            raise ValueError("controller_lease_seconds must be shorter than controller_master_timeout_seconds")
        return self


class StoreConfig(_Model):
    """Message store settings (RocketMQ's MessageStoreConfig)."""

    store_dir: Path = Path("./store")
    commitlog_file_size: int = Field(1024 * 1024 * 1024, ge=4096)
    consume_queue_file_entries: int = Field(300_000, ge=2)
    index_hash_slots: int = Field(5_000_000, ge=1)
    index_max_entries: int = Field(20_000_000, ge=2)
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_ms: int = Field(500, ge=1)
    #: ASYNC_FLUSH flushes when at least this many 4 KiB pages are dirty...
    flush_least_pages: int = Field(4, ge=0)
    #: ...or when this long has passed since the last full flush
    flush_thorough_interval_ms: int = Field(10_000, ge=1)
    consume_queue_flush_interval_ms: int = Field(1000, ge=1)
    sync_flush_timeout_ms: int = Field(5000, ge=1)
    #: SYNC_FLUSH: after a sync, wait up to this long (and at most twice as long as the recent
    #: groups took to come back, or one sync's duration before one did) for the senders it
    #: answered to send again, so the next sync covers them too; 0: no waiting
    sync_flush_linger_us: int = Field(500, ge=0, le=10_000)
    #: SYNC_FLUSH: the warmer also writes the zeroed pages ahead of the writer back to disk, so
    #: that the senders' syncs find the file's blocks already written (~half the msync time on
    #: ext4; the commitlog is written twice). RocketMQ: warmMapedFileEnable under SYNC_FLUSH
    sync_flush_write_ahead: bool = True
    #: SYNC_FLUSH: the commitlog's records are written with pwrite rather than through its
    #: mapping (reads still map it): a page dirtied through a shared mapping costs its sync
    #: ~2.7x more on ext4 (~280 vs ~100 us here, benchmarks/dirty_path_bench.py)
    sync_flush_pwrite: bool = True
    max_message_size: int = Field(4 * 1024 * 1024, ge=1024)
    max_topic_length: int = Field(127, ge=1, le=65535)
    check_crc_on_recover: bool = True
    #: commitlog files older than this are deleted at the ``delete_when`` hours
    file_reserved_hours: float = Field(72.0, gt=0)
    #: hours of the day (local time) for expiry deletion, ``;``-separated
    delete_when: str = "04"
    #: disk use above this: expired files go at once, not only at the delete_when hours
    disk_max_used_ratio: float = Field(0.75, gt=0, le=1)
    #: disk use above this: the oldest files go even if not expired (1.0: never)
    disk_clean_forcibly_ratio: float = Field(0.85, gt=0, le=1)
    #: False: unexpired data is never deleted to free space; a full disk only refuses writes
    clean_file_forcibly_enable: bool = True
    #: disk use above this: writes are refused (SERVICE_NOT_AVAILABLE, "disk full")
    disk_full_ratio: float = Field(0.90, gt=0, le=1)
    cleanup_interval_ms: int = Field(10_000, ge=10)
    #: testing hook: pretend the store's disk holds this many bytes and only the store uses it
    simulated_disk_capacity: int | None = Field(None, ge=1)
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # --- many queues (issue 19) ---
    #: consume-queue files kept mapped at once (least recently used ones are unmapped past it;
    #: a mapping holds no file descriptor on Linux, so this bounds mappings, not descriptors)
    consume_queue_max_mapped_files: int = Field(16_384, ge=1)
    # --- consume-queue file backlog (session 25) ---
    #: new consume-queue files waiting for the file-maker thread (their entries buffered in
    #: memory) past which puts are refused (SERVICE_NOT_AVAILABLE) until it catches up (0: no limit)
    consume_queue_max_pending_files: int = Field(50_000, ge=0)
    #: bytes of consume-queue entries buffered for those files past which puts are refused (0: no limit)
    consume_queue_max_pending_bytes: int = Field(64 * 1024 * 1024, ge=0)

    @field_validator("delete_when")
    @classmethod
    def _check_hours(cls, v: str) -> str:
        for h in v.split(";"):
            if not h.strip().isdigit() or not 0 <= int(h) <= 23:
                raise ValueError(f"delete_when must be hours 0-23 separated by ';', got {v!r}")
        return v

    @field_validator("message_delay_level")
    @classmethod
    def _check_levels(cls, v: str) -> str:
        parse_delay_levels(v)
        return v

    @property
    def commitlog_pwrite(self) -> bool:
        """The commitlog writes with pwrite (SYNC_FLUSH with ``sync_flush_pwrite``), else through its mapping."""
        return self.flush_disk_type == FlushDiskType.SYNC_FLUSH and self.sync_flush_pwrite

    @property
    def delete_hours(self) -> set[int]:
        return {int(h) for h in self.delete_when.split(";")}

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)


class BrokerConfig(_Model):
    """``pymq-broker`` settings."""

    cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = Field(0, ge=0)
    role: BrokerRole = BrokerRole.ASYNC_MASTER
    host: str = "0.0.0.0"
    port: int = Field(10911, ge=0, le=65535)
    #: address announced to nameservers and clients; defaults to host, or this machine's IP for 0.0.0.0
    advertised_host: str | None = None
    namesrv_addrs: list[str] = Field(default_factory=lambda: ["127.0.0.1:9876"])
    register_interval_seconds: float = Field(30.0, gt=0)
    #: also serve RocketMQ 5.x clients (the gRPC front end in this process, "local mode") on this port;
    #: None: not served (pymq-proxy is the stand-alone form)
    grpc_port: int | None = Field(None, ge=0, le=65535)
    auto_create_topic: bool = False
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = Field(8, ge=1, le=1024)
    long_polling_max_seconds: float = Field(15.0, gt=0)
    client_channel_expiry_seconds: float = Field(120.0, gt=0)
    client_scan_interval_seconds: float = Field(10.0, gt=0)
    offset_flush_interval_seconds: float = Field(5.0, gt=0)
    queue_lock_expiry_seconds: float = Field(60.0, gt=0)
    #: master address a slave replicates from (brokerId > 0)
    master_addr: str | None = None
    slave_read_enable: bool = False
    # --- slave reads (issue 16, client side) ---
    #: a pull whose unread commitlog bytes exceed this percentage of physical memory is told to
    #: read from a slave (``whichBrokerWhenConsumeSlowly``), with ``slave_read_enable`` only (RocketMQ: 40)
    access_message_in_memory_max_ratio: int = Field(40, ge=0, le=100)
    #: that lag in bytes, set explicitly instead of the memory ratio (None: use the ratio)
    slave_read_lag_bytes: int | None = Field(None, ge=0)
    metrics_port: int | None = Field(None, ge=0, le=65535)
    log_level: str = "info"
    #: close a connection that sent nothing for this long and has no request in flight (0: never)
    idle_timeout_seconds: float = Field(120.0, ge=0)
    #: close a connection whose frame, once begun, is not complete within this time (0: never)
    frame_read_timeout_seconds: float = Field(60.0, ge=0)
    #: bytes all connections may hold in unfinished frames; past it, large new frames are refused (0: no cap)
    max_partial_frame_bytes: int = Field(128 * 1024 * 1024, ge=0)
    #: access control and TLS (issue 20; see docs/security.md)
    acl: AclSettings = Field(default_factory=AclSettings)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    # --- replication (master/slave, see docs/ARCHITECTURE.md "Replication") ---
    #: a master's HA listener port (None: the main port + 1, or any free port when the main port is 0)
    ha_port: int | None = Field(None, ge=0, le=65535)
    #: a slave's master HA address (host:port); None: asked from the master's main port (``haAddress``)
    ha_master_addr: str | None = None
    #: SYNC_MASTER: slaves that must hold a message before its send answers
    in_sync_replicas: int = Field(1, ge=1)
    #: SYNC_MASTER: replicas (the master counted) that must be in sync for a send to be stored at all;
    #: below it a send is refused before storing (SYSTEM_ERROR "in-sync replicas not enough", as RocketMQ 5)
    min_in_sync_replicas: int = Field(1, ge=1)
    #: SYNC_MASTER: how long a send waits for its slaves before FLUSH_SLAVE_TIMEOUT
    slave_ack_timeout_ms: int = Field(3000, ge=1)
    #: a slave further behind its master than this is not in sync (SYNC_MASTER does not count it)
    ha_max_lag_bytes: int = Field(256 * 1024 * 1024, ge=0)
    #: a slave that has not caught up with its master for this long leaves the sync-state set, and
    #: rejoins once caught up (RocketMQ 5's haMaxTimeSlaveNotCatchup; docs/REPLICATION.md)
    ha_max_time_slave_not_catchup_seconds: float = Field(15.0, gt=0)
    #: commitlog bytes per HA data frame at most
    ha_batch_bytes: int = Field(256 * 1024, ge=4096)
    #: a master sends a heartbeat after this long without data; a slave drops a link silent for 3x it
    ha_heartbeat_seconds: float = Field(1.0, gt=0)
    #: how often a slave copies topics, consumer offsets, delay offsets and subscription groups
    slave_sync_interval_seconds: float = Field(10.0, gt=0)
    # --- transactional messages (RocketMQ's transactionTimeOut, transactionCheckMax) ---
    #: a half message with no outcome after this long is checked back with a producer of its group
    transaction_timeout_seconds: float = Field(6.0, gt=0)
    #: check-backs of one half message before it goes to TRANS_CHECK_MAX_TIME_TOPIC
    transaction_check_max: int = Field(15, ge=1)
    #: how often the half queue is scanned for messages due for a check-back
    transaction_check_interval_seconds: float = Field(5.0, gt=0)
    # pop consumption (SimpleConsumer): queues of the revive log and how often unacked messages are revived
    pop_revive_queue_nums: int = Field(8, ge=1, le=64)
    pop_revive_interval_seconds: float = Field(1.0, gt=0)
    #: popped batches (checkpoints) in flight at most; past it pops find nothing until some are acked or revived
    #: (RocketMQ's popInflightMessageThreshold: it bounds the broker's in-memory checkpoint index)
    pop_max_inflight_checkpoints: int = Field(100_000, ge=1)
    # --- timer and merged-delay messages (issue 17; pymq.broker.timer) ---
    #: False: timer properties are ignored (messages are stored on their topic at once)
    timer_enable: bool = True
    #: the longest delay a timer message may ask for (3 days); beyond it: MESSAGE_ILLEGAL
    timer_max_delay_ms: int = Field(3 * 24 * 3600 * 1000, ge=1000)
    #: one TimerWheel slot (the wheel has 2 x max delay / precision slots, fixed when created)
    timer_precision_ms: int = Field(1000, ge=10, le=60_000)
    #: TimerLog segment size in bytes (a multiple of 40; 40 MB = 1,000,000 timers)
    timer_log_file_size: int = Field(40_000_000, ge=4000)
    #: merged delay: whose message is delivered, the first of the window's or the last
    timer_merge_keep: Literal["first", "last"] = "first"
    # --- priority topics (issue 17; pymq.broker.priority) ---
    #: a message waiting this long in its level queue counts as aged: aged ones, oldest first, take up to
    #: priority_aged_share of each refill before the rest goes by priority (0: strict priority)
    priority_max_wait_ms: int = Field(10_000, ge=0)
    #: messages moved to a priority topic's queue per refill (when a pull has read everything moved)
    priority_refill_batch: int = Field(32, ge=1, le=1024)
    #: the share of a refill that messages waiting priority_max_wait_ms or longer may take (at least one
    #: message); the rest goes by priority, so a backlog of old messages does not turn priority off
    priority_aged_share: float = Field(0.25, gt=0, le=1)
    # --- failover controller (issue 32; docs/REPLICATION.md "Automatic failover") ---
    #: heartbeat to the controller, take the role it assigns, hold mastership by its lease
    controller_mode: bool = False
    #: controllers to heartbeat to (empty: the nameservers)
    controller_addrs: list[str] = Field(default_factory=list)
    controller_heartbeat_seconds: float = Field(0.5, gt=0)
    #: election priority among equally up-to-date replicas (higher wins)
    controller_priority: int = Field(0, ge=-1000, le=1000)
    #: what a slave becomes when elected
    controller_master_role: BrokerRole = BrokerRole.SYNC_MASTER
    store: StoreConfig = Field(default_factory=StoreConfig)

    @field_validator("namesrv_addrs")
    @classmethod
    def _check_addrs(cls, v: list[str]) -> list[str]:
        return check_namesrv_addrs(v)


class ProxyConfig(_Model):
    """``pymq-proxy`` settings: the stateless RocketMQ 5.x gRPC front end (pymq.grpc_proxy)."""

    host: str = "0.0.0.0"
    port: int = Field(8081, ge=0, le=65535)
    #: the host put in route answers (clients connect back to it); default: host, or 127.0.0.1 for 0.0.0.0
    advertised_host: str | None = None
    namesrv_addrs: list[str] = Field(default_factory=lambda: ["127.0.0.1:9876"])
    log_level: str = "info"
    #: largest message body a client may send (also told to producers in Telemetry settings)
    max_body_size: int = Field(4 * 1024 * 1024, ge=1)
    #: receive batch size and long-polling time told to consumers in Telemetry settings
    receive_batch_size: int = Field(32, ge=1, le=32)
    long_polling_ms: int = Field(20_000, ge=0)
    #: a ReceiveMessage without invisible_duration gets this one
    default_invisible_ms: int = Field(30_000, ge=100)
    #: RocketMQ's rule for a topic without a ``message.type`` attribute: NORMAL messages only
    #: (default: such a topic accepts every type, as pymq's topics always did)
    unset_message_type_is_normal: bool = False
    #: ``[acl]``: with ``enable``, 5.x clients' authorization headers are checked against ``file``'s
    #: accounts; ``access_key``/``secret_key`` sign the front end's own requests to ACL brokers
    acl: AclSettings = Field(default_factory=AclSettings)
    #: how far a 5.x client's signed ``x-mq-date-time`` may be from this clock (0: not checked)
    acl_date_window_seconds: float = Field(900.0, ge=0)
    #: ``[tls]``: TLS on the gRPC port with these certificate files (``enable``, ``cert_file``, ...)
    tls: TlsSettings = Field(default_factory=TlsSettings)

    @field_validator("namesrv_addrs")
    @classmethod
    def _check_addrs(cls, v: list[str]) -> list[str]:
        return check_namesrv_addrs(v)


M = TypeVar("M", bound=BaseModel)


class DashboardConfig(_Model):
    """``pymq-dashboard`` settings (issue 33): the operators' web dashboard."""

    #: HTTP listen address (the dashboard has no TLS of its own: put it behind a proxy to expose it)
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    namesrv_addrs: list[str] = Field(default_factory=lambda: ["127.0.0.1:9876"])
    #: refuse every mutation (topic create, test send, offset reset, DLQ resend)
    read_only: bool = False
    #: ask for an ACL account's access key and secret key; every admin RPC is then signed with them
    login: bool = False
    #: signs the session cookie; unset: a random key per process (sessions end with it)
    session_secret: str | None = None
    #: the charts' own polls: every this many seconds, kept for ``history_seconds``
    poll_interval_seconds: float = Field(10.0, gt=0)
    history_seconds: float = Field(3600.0, gt=0)
    #: the account the charts' polls use when the cluster has ACL on (without login, also the pages')
    access_key: str | None = None
    secret_key: str | None = None
    rpc_timeout_seconds: float = Field(5.0, gt=0)
    #: a Grafana dashboard for this cluster: linked from the Charts page
    grafana_url: str | None = None
    log_level: str = "info"

    @field_validator("namesrv_addrs")
    @classmethod
    def _check_addrs(cls, v: list[str]) -> list[str]:
        return check_namesrv_addrs(v)


def _is_list_field(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list


def _env_overrides(model: type[BaseModel], prefix: str, env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = prefix + name.upper()
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            nested = _env_overrides(ann, key + "__", env)
            if nested:
                out[name] = nested
            continue
        if key in env:
            raw = env[key]
            out[name] = (
                [p.strip() for p in raw.replace(",", ";").split(";") if p.strip()] if _is_list_field(ann) else raw
            )
    return out


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def format_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        text = f"{loc}: {err['msg']} (got {err.get('input')!r})"
        if err["type"] == "extra_forbidden" and model is not None:
            text += _where_it_belongs(model, [str(p) for p in err["loc"]])
        parts.append(text)
    return "; ".join(parts)


def _setting_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every setting of a model, nested tables included: ("port",), ("store", "store_dir"), ..."""
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _setting_paths(ann, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def setting_field(model: type[BaseModel], dotted: str) -> FieldInfo | None:
    """The field a dotted setting name (``store.delete_when``) names, or None."""
    *tables, name = dotted.split(".")
    for table in tables:
        field = model.model_fields.get(table)
        ann = field.annotation if field is not None else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return model.model_fields.get(name)


def _where_it_belongs(model: type[BaseModel], loc: list[str]) -> str:
    """A hint for an unknown key: the table it belongs in, or a close spelling."""
    name = loc[-1]
    paths = _setting_paths(model)
    homes = [p for p in paths if p[-1] == name and list(p) != loc]
    if homes:
        home = homes[0]
        table = ".".join(home[:-1])
        where = f"in the [{table}] table" if table else "at the top level"
        return f"; it belongs {where}: {'.'.join(home)}"
    prefix = tuple(loc[:-1])
    siblings = [p[-1] for p in paths if p[:-1] == prefix]
    close = difflib.get_close_matches(name, siblings, n=1)
    return f"; did you mean {'.'.join((*prefix, close[0]))}?" if close else ""


def load_config(
    model: type[M],
    path: str | Path | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    env_prefix: str = "PYMQ_",
) -> M:
    """Build a config model from a TOML file, the environment and explicit overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {path}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    data = _merge(data, _env_overrides(model, env_prefix, dict(os.environ) if env is None else env))
    data = _merge(data, {k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration: {format_validation_error(exc, model)}") from exc
