"""load_config sources and precedence, validation errors, and delay-level parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pymq.config import (
    DEFAULT_DELAY_LEVELS,
    BrokerConfig,
    BrokerRole,
    FlushDiskType,
    NamesrvConfig,
    StoreConfig,
    load_config,
    parse_delay_levels,
)
from pymq.errors import ConfigError


@pytest.fixture
def toml_file(tmp_path: Path):
    def write(text: str) -> Path:
        p = tmp_path / "pymq.toml"
        p.write_text(text)
        return p

    return write


def test_defaults() -> None:
    """With no file, env or overrides every field has its documented default."""
    cfg = load_config(BrokerConfig, env={})
    assert cfg == BrokerConfig()
    assert cfg.broker_name == "broker-a" and cfg.port == 10911 and cfg.role is BrokerRole.ASYNC_MASTER
    assert cfg.namesrv_addrs == ["127.0.0.1:9876"]
    assert cfg.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert cfg.store.store_dir == Path("./store")
    assert cfg.store.delay_levels_ms[0] == 1000 and len(cfg.store.delay_levels_ms) == 18
    ns = load_config(NamesrvConfig, env={})
    assert ns.port == 9876 and ns.broker_expiry_seconds == 120.0 and ns.metrics_port is None


def test_toml_file(toml_file) -> None:
    """Values, including nested [store] tables and lists, are read from a TOML file."""
    path = toml_file(
        'broker_name = "broker-x"\nport = 20911\nrole = "SLAVE"\nbroker_id = 1\n'
        'namesrv_addrs = ["10.0.0.1:9876", "10.0.0.2:9876"]\n'
        '[store]\nflush_disk_type = "SYNC_FLUSH"\nstore_dir = "/data/store"\ndelete_when = "04;16"\n'
    )
    cfg = load_config(BrokerConfig, path, env={})
    assert (cfg.broker_name, cfg.port, cfg.role, cfg.broker_id) == ("broker-x", 20911, BrokerRole.SLAVE, 1)
    assert cfg.namesrv_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert cfg.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.store.store_dir == Path("/data/store")
    assert cfg.store.delete_hours == {4, 16}
    assert cfg.store.flush_interval_ms == 500  # untouched defaults survive
    assert load_config(BrokerConfig, str(path), env={}).port == 20911  # str paths work too


def test_env_vars() -> None:
    """PYMQ_* variables set top-level, nested (double underscore) and list (';' or ',') fields."""
    env = {
        "PYMQ_BROKER_NAME": "broker-env",
        "PYMQ_PORT": "30911",
        "PYMQ_AUTO_CREATE_TOPIC": "true",
        "PYMQ_STORE__FLUSH_DISK_TYPE": "SYNC_FLUSH",
        "PYMQ_STORE__FLUSH_INTERVAL_MS": "50",
        "PYMQ_NAMESRV_ADDRS": "10.0.0.1:9876; 10.0.0.2:9876;",
        "PYMQ_UNRELATED": "ignored",
        "OTHER_PORT": "1",
    }
    cfg = load_config(BrokerConfig, env=env)
    assert (cfg.broker_name, cfg.port, cfg.auto_create_topic) == ("broker-env", 30911, True)
    assert cfg.store.flush_disk_type is FlushDiskType.SYNC_FLUSH and cfg.store.flush_interval_ms == 50
    assert cfg.namesrv_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]
    cfg = load_config(BrokerConfig, env={"PYMQ_NAMESRV_ADDRS": "a:1,b:2"})
    assert cfg.namesrv_addrs == ["a:1", "b:2"]


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit env mapping, os.environ is read."""
    monkeypatch.setenv("PYMQ_PORT", "9999")
    monkeypatch.setenv("PYMQ_STORE__FLUSH_DISK_TYPE", "SYNC_FLUSH")
    cfg = load_config(BrokerConfig)
    assert cfg.port == 9999 and cfg.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert load_config(NamesrvConfig).port == 9999


def test_custom_env_prefix() -> None:
    """env_prefix selects a different variable prefix."""
    cfg = load_config(NamesrvConfig, env={"NS_PORT": "1234", "PYMQ_PORT": "1"}, env_prefix="NS_")
    assert cfg.port == 1234


def test_precedence(toml_file) -> None:
    """Overrides beat env, env beats TOML, TOML beats defaults, field by field (nested too)."""
    path = toml_file(
        'broker_name = "toml"\nport = 1\ncluster_name = "toml-cluster"\n'
        "[store]\nflush_interval_ms = 11\nsync_flush_timeout_ms = 12\nflush_least_pages = 13\n"
    )
    env = {
        "PYMQ_BROKER_NAME": "env",
        "PYMQ_PORT": "2",
        "PYMQ_STORE__FLUSH_INTERVAL_MS": "21",
        "PYMQ_STORE__SYNC_FLUSH_TIMEOUT_MS": "22",
    }
    overrides = {"port": 3, "cluster_name": None, "store": {"flush_interval_ms": 31}}
    cfg = load_config(BrokerConfig, path, env=env, overrides=overrides)
    assert cfg.port == 3  # flag
    assert cfg.broker_name == "env"  # env over toml
    assert cfg.cluster_name == "toml-cluster"  # None override is ignored
    assert cfg.store.flush_interval_ms == 31  # nested flag
    assert cfg.store.sync_flush_timeout_ms == 22  # nested env over toml
    assert cfg.store.flush_least_pages == 13  # toml over default
    assert cfg.store.consume_queue_flush_interval_ms == 1000  # default


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"PYMQ_PORT": "abc"}, "port"),
        ({"PYMQ_PORT": "70000"}, "port"),
        ({"PYMQ_ROLE": "LEADER"}, "role"),
        ({"PYMQ_STORE__FLUSH_DISK_TYPE": "SOMETIMES"}, "store.flush_disk_type"),
        ({"PYMQ_STORE__DELETE_WHEN": "25"}, "store.delete_when"),
        ({"PYMQ_STORE__MESSAGE_DELAY_LEVEL": "1s 5x"}, "store.message_delay_level"),
        ({"PYMQ_STORE__DISK_FULL_RATIO": "1.5"}, "store.disk_full_ratio"),
        ({"PYMQ_NAMESRV_ADDRS": "nohostport"}, "namesrv_addrs"),
        ({"PYMQ_DEFAULT_TOPIC_QUEUE_NUMS": "0"}, "default_topic_queue_nums"),
    ],
)
def test_bad_values(env: dict[str, str], needle: str) -> None:
    """An invalid value raises ConfigError naming the field and the offending input."""
    with pytest.raises(ConfigError) as info:
        load_config(BrokerConfig, env=env)
    msg = str(info.value)
    assert msg.startswith("invalid configuration:")
    assert needle in msg
    assert repr(next(iter(env.values()))) in msg or needle == "namesrv_addrs"


def test_unknown_keys(toml_file) -> None:
    """Unknown top-level or nested keys in TOML or overrides raise ConfigError naming them."""
    with pytest.raises(ConfigError, match="brokr_name"):
        load_config(BrokerConfig, toml_file('brokr_name = "x"\n'), env={})
    with pytest.raises(ConfigError, match=r"store\.flush_type"):
        load_config(BrokerConfig, toml_file('[store]\nflush_type = "x"\n'), env={})
    with pytest.raises(ConfigError, match="bogus"):
        load_config(NamesrvConfig, env={}, overrides={"bogus": 1})


def test_missing_and_invalid_file(tmp_path: Path, toml_file) -> None:
    """A missing file or invalid TOML raises ConfigError with the path in the message."""
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="config file not found") as info:
        load_config(BrokerConfig, missing, env={})
    assert str(missing) in str(info.value)
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(BrokerConfig, toml_file("port = = 3\n"), env={})


def test_config_error_is_pymq_error() -> None:
    """ConfigError chains the pydantic error and is a PymqError."""
    from pymq.errors import PymqError

    with pytest.raises(PymqError) as info:
        load_config(NamesrvConfig, env={"PYMQ_BROKER_EXPIRY_SECONDS": "-1"})
    assert info.value.__cause__ is not None


def test_validate_assignment() -> None:
    """Models validate on assignment, so a later bad value is refused too."""
    cfg = StoreConfig()
    with pytest.raises(ValueError):
        cfg.flush_interval_ms = 0  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("1s 5s 10s 1m", [1000, 5000, 10000, 60000]),
        ("500ms 1.5s 2m 1h 1d", [500, 1500, 120000, 3600000, 86400000]),
        ("  10s\t20s\n", [10000, 20000]),
        ("0s", [0]),
    ],
)
def test_parse_delay_levels(spec: str, want: list[int]) -> None:
    """Delay level specs convert each token with its unit into milliseconds."""
    assert parse_delay_levels(spec) == want


@pytest.mark.parametrize("spec", ["", "   ", "5", "5x", "s", "ms", "-1s", "1..5s", "1s five"])
def test_parse_delay_levels_rejects(spec: str) -> None:
    """Empty specs and tokens without a valid number and unit raise ValueError."""
    with pytest.raises(ValueError):
        parse_delay_levels(spec)


def test_default_delay_levels() -> None:
    """The default spec has RocketMQ's 18 levels from 1s to 2h."""
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(levels) == 18 and levels[0] == 1000 and levels[-1] == 7_200_000
    assert levels == sorted(levels)
