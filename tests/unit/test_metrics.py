"""The proxy's metrics as rendered: the exporter beside tinyproxy, the generation, the PodMonitor, the alerts (checked
and unit-tested by Debian's promtool, which must be installed: the test fails without it) and the dashboard."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.cli import main
from proxy_component.dataplane.config import config_generation, config_object, tinyproxy_conf
from proxy_component.dataplane.metrics import ALERTS, LOG_FILE, metrics_objects, prometheus_rule
from proxy_component.dataplane.workload import daemonset
from proxy_component.render import manifests
from proxy_component.settings import Settings, SettingsError, parse_settings

CLUSTER = {"podCidrs": ["10.244.0.0/16"], "nodeCidrs": ["192.168.0.0/24"]}
PASSWORD = "s3cret-Pass:word"


def _settings(metrics: dict[str, Any] | None = None, deployment_firewall: bool = True, **extra: Any) -> Settings:
    deployment: dict[str, Any] = {"metrics": {"enabled": True, **(metrics or {})}}
    if not deployment_firewall:
        deployment["firewall"] = {"enabled": False}
    return parse_settings({"cluster": CLUSTER, "deployment": deployment, **extra})


def _upstream(password: str) -> dict[str, Any]:
    return {"upstream": {"url": "http://proxy.corp:3128", "username": "svc", "password": password}}


def _containers(settings: Settings) -> dict[str, Any]:
    spec = daemonset(settings, "digest")["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


def test_without_metrics_nothing_changes() -> None:
    settings = parse_settings({"cluster": CLUSTER})
    assert "LogFile" not in tinyproxy_conf(settings, settings.allowed_sources())
    assert sorted(_containers(settings)) == ["firewall", "tinyproxy"]
    assert [v["name"] for v in daemonset(settings, "d")["spec"]["template"]["spec"]["volumes"]] == ["config"]
    # The generation key is there with or without metrics: the tinyproxy container's watcher logs it.
    assert set(config_object(settings, "conf")["data"]) == {"tinyproxy.conf", "generation", "filter", "nftables.conf"}
    kinds = [o["kind"] for o in manifests(parse_settings({"cluster": CLUSTER, "deployment": {"metrics": {
        "podMonitor": True, "prometheusRule": True, "grafanaDashboard": True}}}))]  # fmt: skip
    assert "PodMonitor" not in kinds
    assert "PrometheusRule" not in kinds


def test_the_exporter_runs_beside_tinyproxy_with_its_own_uid_and_port_and_no_capability() -> None:
    settings = _settings()
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    assert f'LogFile "{LOG_FILE}"' in conf.splitlines()
    containers = _containers(settings)
    assert sorted(containers) == ["firewall", "log-file", "metrics", "tinyproxy"]
    metrics = containers["metrics"]
    assert metrics["command"] == [
        "proxy-exporter", "--listen", ":9888", "--stats", "127.0.0.1:8888", "--stat-host", "proxy-component.invalid",
        "--log", LOG_FILE, "--generation-file", "/etc/tinyproxy/generation", "--max-clients", "1792",
    ]  # fmt: skip
    assert metrics["ports"] == [{"name": "metrics", "containerPort": 9888, "hostPort": 9888, "protocol": "TCP"}]
    security = metrics["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (61889, 61888)
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert "readinessProbe" not in metrics  # an exporter never takes the node's proxy out of its Service
    assert containers["log-file"]["command"][-1] == f"umask 007 && : >> {LOG_FILE}"
    assert containers["log-file"]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    log_mounts = {c: [m for m in containers[c]["volumeMounts"] if m["name"] == "log"] for c in containers}
    assert {c for c, m in log_mounts.items() if m} == {"log-file", "metrics", "tinyproxy"}
    template = daemonset(settings, "d")["spec"]["template"]
    assert {"name": "log", "emptyDir": {}} in template["spec"]["volumes"]
    assert "prometheus.io/scrape" not in template["metadata"]["annotations"]
    annotated = daemonset(_settings({"scrapeAnnotations": True, "port": 9100}), "d")["spec"]["template"]["metadata"]
    assert {k: v for k, v in annotated["annotations"].items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/path": "/metrics",
        "prometheus.io/port": "9100",
        "prometheus.io/scrape": "true",
    }


def test_firewall_counters_are_opt_in_a_third_container_root_with_net_admin_alone_reading_the_table() -> None:
    """`metrics.firewallCounters`: the kernel rules' counters need CAP_NET_ADMIN in the node's network, so a third
    container (the firewall image, root with NET_ADMIN alone, read-only root, the log volume its one writable path)
    lists the table into that volume; the exporter reads it. Off by default: no such container, no such flag."""
    assert "firewall-counters" not in _containers(_settings())
    assert "--firewall-counters" not in _containers(_settings())["metrics"]["command"]
    containers = _containers(_settings({"firewallCounters": True}))
    assert sorted(containers) == ["firewall", "firewall-counters", "log-file", "metrics", "tinyproxy"]
    counters = containers["firewall-counters"]
    assert counters["image"] == containers["firewall"]["image"]
    assert counters["securityContext"] == {
        "runAsUser": 0, "runAsGroup": 61888, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "privileged": False, "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
    }  # fmt: skip
    assert counters["volumeMounts"] == [{"name": "log", "mountPath": "/var/log/tinyproxy"}]
    assert "nft -j list table inet proxy-component > /var/log/tinyproxy/firewall.json" in counters["command"][2]
    assert "ports" not in counters
    assert containers["metrics"]["command"][-2:] == ["--firewall-counters", "/var/log/tinyproxy/firewall.json"]
    # Every refusing rule carries the comment the exporter reads it by.
    from proxy_component.dataplane.firewall import FIREWALL_RULES, firewall_rules

    rules = firewall_rules(_settings({"firewallCounters": True}))
    assert {m for m in re.findall(r'counter reject with tcp reset comment "([a-z-]+)"', rules)} == set(FIREWALL_RULES)
    assert rules.count("counter reject with tcp reset") == rules.count("counter reject with tcp reset comment")
    # Without the firewall there is nothing to count: an error naming both fields.
    with pytest.raises(SettingsError) as info:
        _settings({"firewallCounters": True}, deployment_firewall=False)
    assert "deployment.metrics.firewallCounters: true reads the counters of the kernel rules that " in str(info.value)


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        (
            {"port": 8888},
            "deployment.metrics.port: 8888 is the proxy's own port (deployment.port); the exporter needs a port of its "
            "own (expected another, e.g. 9888)",
        ),
        (
            {"runAsUser": 61888},
            "deployment.metrics.runAsUser: 61888 is tinyproxy's own UID (deployment.runAsUser), whose connections to "
            "the node's addresses the firewall refuses, the stats page's on loopback among them (expected another "
            "UID, e.g. 61889)",
        ),
        ({"port": 80}, "deployment.metrics.port: 80: Input should be greater than or equal to 1024"),
        ({"podmonitor": True}, "deployment.metrics.podmonitor"),
    ],
)
def test_metrics_settings_errors_name_the_field_the_value_and_what_is_accepted(
    metrics: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError) as info:
        _settings(metrics)
    assert message in str(info.value)


def test_the_generation_never_derives_from_the_credential() -> None:
    with_password = _settings(proxy=_upstream(PASSWORD))
    other_password = _settings(proxy=_upstream("another-one"))
    confs = [tinyproxy_conf(s, s.allowed_sources()) for s in (with_password, other_password)]
    assert PASSWORD in confs[0]
    objects = [config_object(s, c) for s, c in zip((with_password, other_password), confs, strict=True)]
    assert objects[0]["kind"] == "Secret"
    generations = [o["stringData"]["generation"] for o in objects]
    assert generations[0] == generations[1]  # the password is not in what is hashed
    assert re.fullmatch(r"[0-9a-f]{16}", generations[0])
    assert generations[0] == config_generation(with_password, with_password.allowed_sources())
    bypass = _settings(proxy={"upstream": {**_upstream(PASSWORD)["upstream"], "noUpstream": [".corp.example"]}})
    assert config_generation(bypass, bypass.allowed_sources()) != generations[0]
    rendered = yaml.safe_dump_all(metrics_objects(with_password))
    assert PASSWORD not in rendered
    assert "svc" not in rendered


def test_plan_creates_what_the_settings_ask_and_render_prints_all_three(capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings(
        {"podMonitor": True, "prometheusRule": True, "grafanaDashboard": True, "labels": {"release": "kps"}}
    )
    objects = {(o["kind"], o["metadata"]["name"]) for o in manifests(settings)}
    assert {
        ("PodMonitor", "http-proxy"),
        ("PrometheusRule", "http-proxy"),
        ("ConfigMap", "http-proxy-dashboard"),
    } <= objects
    only_rule = {o["kind"] for o in manifests(_settings({"prometheusRule": True}))}
    assert "PrometheusRule" in only_rule
    assert "PodMonitor" not in only_rule
    pod_monitor = next(o for o in manifests(settings) if o["kind"] == "PodMonitor")
    assert pod_monitor["metadata"]["labels"]["release"] == "kps"
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert main(["render", "--format", "metrics"]) == 0
    out = capsys.readouterr().out
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["PodMonitor", "PrometheusRule", "ConfigMap"]
    assert main(["render", "--format", "metrics"]) == 0
    assert capsys.readouterr().out == out  # deterministic


def test_the_dashboard_is_json_labelled_for_grafanas_sidecar() -> None:
    dashboard = metrics_objects(_settings())[2]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    model = json.loads(dashboard["data"]["proxy-component.json"])
    assert model["uid"] == "proxy-component-node-proxies"
    exprs = " ".join(t["expr"] for p in model["panels"] for t in p["targets"])
    for metric in ("tinyproxy_connections_total", "tinyproxy_refusals_total", "tinyproxy_upstream_failures_total",
                   "tinyproxy_config_reloads_total", "tinyproxy_config_info", "tinyproxy_up"):  # fmt: skip
        assert metric in exprs


def test_every_alert_has_a_runbook_line() -> None:
    rules = prometheus_rule(_settings())["spec"]["groups"][0]["rules"]
    assert tuple(r["alert"] for r in rules) == ALERTS
    for rule in rules:
        assert rule["annotations"]["runbook"]
        assert rule["annotations"]["runbook_url"].startswith("https://")


# --- promtool ---------------------------------------------------------------------------------------------------------

POD = {"namespace": "kube-system", "pod": "http-proxy-abcde", "node": "node-1"}
POD2 = {"namespace": "kube-system", "pod": "http-proxy-fghij", "node": "node-2"}


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def _expected(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The alert promtool should see: the rule's labels and annotations, `$labels` expanded."""

    def expand(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)

    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: expand(v) for k, v in rule["annotations"].items()},
    }


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: install Debian's prometheus package (scripts/test does)"
    return path


def test_promtool_checks_and_tests_every_alert(tmp_path: Path) -> None:
    promtool = _promtool()
    rule_obj = prometheus_rule(_settings())
    rules = {r["alert"]: r for r in rule_obj["spec"]["groups"][0]["rules"]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule_obj["spec"]))
    check = subprocess.run([promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 6 rules found" in check.stdout

    def case(series: list[dict[str, str]], alert: str, at: str, fired: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": at, "alertname": alert, "exp_alerts": [_expected(rules[alert], lb) for lb in fired]}
            ],
        }

    capacity_labels = {k: v for k, v in POD.items()}
    tests = [
        # tinyproxy stopped on a node, its exporter still up: fires after 2 minutes, not before.
        case([_series("tinyproxy_up", POD, "1 1 1 0x10"), _series("up", POD, "1x13")], "ProxyDown", "6m", [POD]),
        case([_series("tinyproxy_up", POD, "1 1 1 0x10"), _series("up", POD, "1x13")], "ProxyDown", "4m", []),
        # The whole pod stopped: its target is down.
        case([_series("up", POD2, "1 1 0x10")], "ProxyDown", "6m", [POD2]),
        case(
            [_series("tinyproxy_connections_open", POD, "10 950x10"), _series("tinyproxy_max_clients", POD, "1024x11")],
            "ProxyAtCapacity",
            "8m",
            [capacity_labels],
        ),
        case(
            [_series("tinyproxy_connections_open", POD, "10x10"), _series("tinyproxy_max_clients", POD, "1024x10")],
            "ProxyAtCapacity",
            "8m",
            [],
        ),
        case(
            [_series("tinyproxy_denied_connections_total", POD, "0+6x65 396+600x25")],
            "ProxyRefusalsJumping",
            "85m",
            [{"namespace": POD["namespace"], "pod": POD["pod"]}],
        ),
        case(
            [_series("tinyproxy_denied_connections_total", POD, "0+6x65 396+600x25")],
            "ProxyRefusalsJumping",
            "60m",
            [],
        ),
        # The corporate proxy answering 407 (cause auth) while it is reachable: the pod's failures, every cause.
        case(
            [
                _series("tinyproxy_upstream_failures_total", {**POD, "cause": "unreachable"}, "0x15"),
                _series("tinyproxy_upstream_failures_total", {**POD, "cause": "auth"}, "0 0 0 0+5x12"),
            ],
            "ProxyUpstreamFailing",
            "12m",
            [{"namespace": POD["namespace"], "pod": POD["pod"]}],
        ),
        case(
            [
                _series("tinyproxy_upstream_failures_total", {**POD, "cause": c}, "0x15")
                for c in ("unreachable", "auth")
            ],
            "ProxyUpstreamFailing",
            "12m",
            [],
        ),
        case(
            [
                _series("tinyproxy_config_info", {**POD, "generation": "aaaa"}, "1x30"),
                _series("tinyproxy_config_info", {**POD2, "generation": "bbbb"}, "1x30"),
            ],
            "ProxyConfigNotReloaded",
            "20m",
            [{"namespace": "kube-system"}],
        ),
        case(
            [_series("tinyproxy_config_reloads_total", {**POD, "result": "failure"}, "0 1x30")],
            "ProxyConfigNotReloaded",
            "20m",
            [{**POD, "result": "failure"}],
        ),
        case(
            [
                _series("tinyproxy_config_info", {**POD, "generation": "aaaa"}, "1x30"),
                _series("tinyproxy_config_info", {**POD2, "generation": "aaaa"}, "1x30"),
            ],
            "ProxyConfigNotReloaded",
            "20m",
            [],
        ),
    ]
    tested = {t["alert_rule_test"][0]["alertname"] for t in tests if t["alert_rule_test"][0]["exp_alerts"]}
    assert tested == set(ALERTS)  # every alert fires in at least one case
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "tests": tests}))
    run = subprocess.run([promtool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
