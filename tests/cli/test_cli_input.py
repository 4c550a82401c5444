"""Parsing user input the way the broker will read it: tag expressions, settings, config keys."""

from __future__ import annotations

import click
import pytest

from pymq.cli.admin_ops import _broker_settings
from pymq.config import BrokerConfig, NamesrvConfig, load_config
from pymq.errors import ConfigError
from pymq.protocol.filter import parse_tags, parse_tags_strict


@pytest.mark.parametrize(
    ("expression", "tags"),
    [("*", None), ("", None), ("created", {"created"}), (" created || paid ", {"created", "paid"}), ("a||*", None)],
)
def test_strict_tags_accept_what_the_broker_means(expression: str, tags: set[str] | None) -> None:
    assert parse_tags_strict(expression) == (frozenset(tags) if tags else None) == parse_tags(expression)


@pytest.mark.parametrize("expression", ["created paid", "a,b", "a ||", "|| a", "a | b", "a||b*"])
def test_strict_tags_reject_what_would_match_nothing(expression: str) -> None:
    with pytest.raises(ValueError, match=r"is not a tag expression.*'\|\|'"):
        parse_tags_strict(expression)


def test_broker_settings_parsed_by_field_type() -> None:
    settings = _broker_settings(
        ("store.delete_when=10", "store.disk_full_ratio=0.95", "auto_create_topic=true", "unknown.key=5")
    )
    assert settings == {
        "store.delete_when": "10",
        "store.disk_full_ratio": 0.95,
        "auto_create_topic": True,
        "unknown.key": 5,  # not a setting: sent as given, the broker names the ones it takes
    }
    with pytest.raises(click.BadParameter, match="default_topic_queue_nums=many"):
        _broker_settings(("default_topic_queue_nums=many",))
    with pytest.raises(click.BadParameter, match="KEY=VALUE"):
        _broker_settings(("no-equals-sign",))


def test_config_key_in_the_wrong_table_says_where_it_belongs(tmp_path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('store_dir = "/data/pymq"\n[store]\nport = 1\n')
    with pytest.raises(ConfigError) as err:
        load_config(BrokerConfig, cfg, env={})
    text = str(err.value)
    assert "store_dir: Extra inputs are not permitted" in text
    assert "it belongs in the [store] table: store.store_dir" in text
    assert "store.port: Extra inputs are not permitted" in text and "it belongs at the top level: port" in text


def test_config_key_misspelt_gets_a_suggestion(tmp_path) -> None:
    cfg = tmp_path / "namesrv.toml"
    cfg.write_text("prot = 9876\n")
    with pytest.raises(ConfigError, match=r"did you mean port\?"):
        load_config(NamesrvConfig, cfg, env={})
