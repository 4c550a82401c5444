"""The container and monitoring files (Dockerfile, deploy/compose.yaml, Prometheus, Grafana) hold together.

No container engine runs here, so these check what can be checked without one: every file parses,
every path the compose file mounts exists, Prometheus scrapes every daemon the compose file runs,
the alert rules cover what they must. That the queries name series the exporter really serves is
checked against live scrapes in tests/metrics/test_metrics.py; ``deploy/check-rules.sh``
runs promtool on the rules and the Prometheus config.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "pymq.json"
RULES = DEPLOY / "prometheus" / "pymq-rules.yml"
STORE = "/var/lib/pymq/store"


def bind_mounts(service: dict) -> dict[str, Path]:
    """Container path -> host path (relative to deploy/) of a service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (DEPLOY / source).resolve()
    return mounts


def ip_of(service: str) -> str:
    return SERVICES[service]["networks"]["pymq"]["ipv4_address"]


def test_compose_runs_two_nameservers_a_broker_prometheus_and_grafana() -> None:
    assert {"namesrv-1", "namesrv-2", "broker-a", "prometheus", "grafana"} <= set(SERVICES)
    for name in ("namesrv-1", "namesrv-2"):
        assert SERVICES[name]["command"][0] == "namesrv"
    broker = SERVICES["broker-a"]
    assert broker["command"][0] == "broker"
    args = broker["command"]
    namesrvs = args[args.index("--namesrv") + 1].split(";")
    assert namesrvs == [f"{ip_of('namesrv-1')}:9876", f"{ip_of('namesrv-2')}:9876"]
    assert args[args.index("--advertised-host") + 1] == ip_of("broker-a")
    # the store lives on a named volume, not in the container's writable layer
    assert f"broker-a-store:{STORE}" in broker["volumes"] and "broker-a-store" in COMPOSE["volumes"]


def test_compose_references_existing_files() -> None:
    build = SERVICES["broker-a"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).is_file()
    mounted = {}
    for service in SERVICES.values():
        mounted |= bind_mounts(service)
    assert mounted, "no bind mounts found"
    for target, source in mounted.items():
        assert source.exists(), f"{target} mounts {source}, which does not exist"
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    dashboards = bind_mounts(SERVICES["grafana"])["/var/lib/grafana/dashboards"]
    assert (dashboards / Path(home).name).resolve() == DASHBOARD.resolve()


def test_prometheus_scrapes_every_daemon_and_loads_the_rules() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    daemons = {
        f"{ip_of(name)}:{SERVICES[name]['environment']['PYMQ_METRICS_PORT']}"
        for name, service in SERVICES.items()
        if service.get("command", [""])[0] in ("namesrv", "broker")
    }
    assert len(daemons) == 3 and targets == daemons
    mounts = bind_mounts(SERVICES["prometheus"])
    assert mounts["/etc/prometheus/prometheus.yml"] == (DEPLOY / "prometheus" / "prometheus.yml").resolve()
    for rule_file in config["rule_files"]:
        assert mounts[rule_file] == RULES.resolve()
    datasource = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    assert datasource["datasources"][0]["url"] == f"http://{ip_of('prometheus')}:9090"


def test_alert_rules_cover_disk_lag_and_put_failures() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert all(rule["alert"] and rule["expr"] and rule["annotations"]["summary"] for rule in rules)
    exprs = " ".join(rule["expr"] for rule in rules)
    for series in ("pymq_disk_used_ratio", "pymq_consumer_lag_messages", "pymq_put_failures_total"):
        assert series in exprs, f"no alert on {series}"
    assert len({rule["alert"] for rule in rules}) == len(rules), "alert names repeat"


def test_dashboard_loads_and_is_provisioned() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "pymq" and dashboard["panels"]
    datasource = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    uid = datasource["datasources"][0]["uid"]
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid and target["expr"], panel["title"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/pymq.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_dockerfile_is_slim_non_root_with_the_store_on_a_volume() -> None:
    text = (ROOT / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", text, re.M)
    assert bases and all(base.endswith("-slim") for base in bases)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert f'VOLUME ["{STORE}"]' in text
    for source in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", text, re.M):
        for path in source.split():
            assert (ROOT / path).exists(), f"the Dockerfile copies {path}, which does not exist"
    # The build stage has setup.py and a compiler, so the wheel carries the C accelerator;
    # the runtime stage has neither.
    build, run = text.split("\nFROM ", 2)[1:]
    assert "setup.py" in build and "gcc" in build and "gcc" not in run
    entrypoint = ROOT / "deploy" / "docker" / "entrypoint.sh"
    assert os.access(entrypoint, os.X_OK)
    script = entrypoint.read_text()
    assert "exec pymq-namesrv" in script and f"exec pymq-broker --store-dir {STORE}" in script
    assert os.access(DEPLOY / "check-rules.sh", os.X_OK)


def test_compose_runs_the_web_dashboard_and_addresses_are_unique() -> None:
    addresses = [ip_of(name) for name in SERVICES]
    assert len(set(addresses)) == len(addresses), "two services share an address"
    dashboard = SERVICES["dashboard"]
    args = dashboard["command"]
    assert args[0].endswith("-dashboard") and args[args.index("--host") + 1] == "0.0.0.0"
    port = args[args.index("--port") + 1]
    assert dashboard["ports"] == [f"{port}:{port}"] and f"127.0.0.1:{port}/" in dashboard["healthcheck"]["test"][-1]
    assert args[args.index("--namesrv") + 1] == SERVICES["broker-a"]["command"][-1]
    grafana = args[args.index("--grafana-url") + 1]
    assert grafana.endswith("/d/" + json.loads(DASHBOARD.read_text())["uid"])
    assert dashboard["depends_on"]["broker-a"]["condition"] == "service_healthy"
    proxy = SERVICES["proxy-1"]["command"]
    assert proxy[proxy.index("--advertised-host") + 1] == ip_of("proxy-1")
