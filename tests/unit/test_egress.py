"""`proxy-component egress` without a cluster: access lines read in every form a log holds them, client addresses
joined to pods and nodes, the report's aggregates, NO_PROXY misses with each client's verdict, and the offline CLI."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from proxy_component import egress
from proxy_component.cli import main
from proxy_component.explain import intent, miss_verdicts, resolve_env
from proxy_component.settings import parse_settings

PASSWORD = "Egr3ss-pa55word"
SETTINGS = {
    "cluster": {
        "name": "prod",
        "dnsDomain": "cluster.local",
        "podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
        "serviceCidrs": ["10.96.0.0/12"],
        "nodeCidrs": ["192.0.2.0/24"],
        "apiServerIps": ["10.96.0.1"],
    },
    "namespaces": ["shop", "batch"],
}


def access(client: str, host: str, port: int = 443, **fields: Any) -> str:
    line = {
        "log": "access",
        "time": fields.pop("time", "2026-11-28T10:00:00.000Z"),
        "client": client,
        "client_port": fields.pop("client_port", 40000),
        "method": fields.pop("method", "CONNECT" if port == 443 else "GET"),
        "host": host,
        "port": port,
        "upstream": fields.pop("upstream", False),
        "status": fields.pop("status", 200),
        "result": fields.pop("result", "ok"),
        "cause": fields.pop("cause", ""),
        "bytes_from_client": fields.pop("bytes_from_client", 100),
        "bytes_to_client": fields.pop("bytes_to_client", 1000),
        "duration_ms": fields.pop("duration_ms", 50),
    }
    assert not fields, fields
    return json.dumps(line, separators=(",", ":"))


def pod(
    namespace: str,
    name: str,
    ips: list[str],
    *,
    owner: tuple[str, str] | None = None,
    template_hash: str | None = None,
    env: dict[str, str] | None = None,
    env_from: str | None = None,
    host_network: bool = False,
    node: str = "node-a",
    started: str = "2026-11-28T09:00:00Z",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": name, "creationTimestamp": started}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if template_hash:
        meta["labels"] = {"pod-template-hash": template_hash}
    container: dict[str, Any] = {"name": "app", "image": "app"}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": env_from}}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "hostNetwork": host_network, "containers": [container]},
        "status": {"startTime": started, "podIPs": [{"ip": ip} for ip in ips], "podIP": ips[0]},
    }


PODS = [
    pod(
        "shop",
        "web-7d9f8-abcde",
        ["10.244.1.5", "fd00:10:244::5"],
        owner=("ReplicaSet", "web-7d9f8"),
        template_hash="7d9f8",
        env_from="proxy-config",
    ),
    pod(
        "batch",
        "report-29000-xyz",
        ["10.244.2.9"],
        owner=("Job", "report-29000"),
        env={
            "HTTP_PROXY": f"http://svc:{PASSWORD}@http-proxy.kube-system.svc:8888",
            "HTTPS_PROXY": f"http://svc:{PASSWORD}@http-proxy.kube-system.svc:8888",
        },
    ),
    pod("kube-system", "http-proxy-x", ["192.0.2.10"], owner=("DaemonSet", "http-proxy"), host_network=True),
    pod("shop", "late", ["10.244.3.3"], started="2026-11-28T11:00:00Z"),
]
LOG = "\n".join(
    [
        "2026-11-28T10:00:00.000000001Z "
        + access("10.244.1.5", "github.com", bytes_from_client=10, bytes_to_client=20),
        "NOTICE   Nov 28 10:00:01.000 [7]: " + access("fd00:10:244::5", "github.com", time="2026-11-28T10:00:01.000Z"),
        access("10.244.1.5", "registry.npmjs.org", time="2026-11-28T10:00:02.000Z", upstream=True),
        access("10.244.1.5", "169.254.169.254", 80, result="refused", cause="filter", status=403),
        access(
            "10.244.2.9",
            "billing.shop.svc.cluster.local",
            8080,
            time="2026-11-28T10:00:03.000Z",
            status=502,
            result="error",
            cause="dns",
        ),
        access("10.244.2.9", "10.96.0.1", 443, time="2026-11-28T10:00:04.000Z"),
        access("192.0.2.10", "deb.debian.org", 80),
        access("10.244.3.3", "example.org"),
        access("10.244.9.9", "example.net"),
        '{"log":"access-dropped","time":"2026-11-28T10:00:05.000Z","dropped":7}',
        '{"log":"access-dropped","time":"2026-11-28T10:00:06.000Z","dropped":3}',
        '{"log":"access","time":"2026-11-28T10:00:00.000Z","client":"10.244.1.5"}',
        '{"log":"access", "truncated',
        "NOTICE   Nov 28 10:00:07.000 [7]: Refused 12 connection(s) at accept: over the client's share (last from "
        "10.244.1.5)",
        "proxy-component: reloaded tinyproxy",
    ]
)


def _report(with_settings: bool = True) -> egress.Report:
    settings = parse_settings(SETTINGS)
    no_proxy = settings.no_proxy()

    def verdicts(client: egress.Client, target: Any) -> list[egress.Verdict]:
        env = resolve_env(settings, no_proxy, dict(client.variables), client.env_from)
        return [egress.Verdict(c, d, w) for c, d, w in miss_verdicts(settings, no_proxy, env, target)]

    log = egress.parse_log(LOG, "node-a")
    return egress.report(
        log,
        egress.PodIndex(PODS),
        intent=(lambda t: intent(settings, no_proxy, t)) if with_settings else None,
        verdicts=verdicts if with_settings else None,
    )


def test_every_form_of_an_access_line_is_read_and_the_rest_counted() -> None:
    log = egress.parse_log(LOG, "node-a")
    assert len(log.lines) == 9
    assert log.dropped == 10
    assert log.unreadable == 2  # a line missing its fields, a truncated one
    first = log.lines[0]
    assert (first.client, first.host, first.port, first.method, first.node) == ("10.244.1.5", "github.com", 443,
                                                                                "CONNECT", "node-a")  # fmt: skip
    assert first.time == datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)
    (refusal,) = log.refusals
    assert (refusal.count, refusal.cause, refusal.last_from) == (12, "over the client's share", "10.244.1.5")


def test_clients_are_joined_to_pods_workloads_and_nodes() -> None:
    index = egress.PodIndex(PODS)
    at = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)
    assert index.client("10.244.1.5", at).key == ("shop", "Deployment/web")
    assert index.client("fd00:10:244:0::5", at).key == ("shop", "Deployment/web")  # any spelling of the address
    assert index.client("10.244.2.9", at).key == ("batch", "Job/report-29000")
    assert index.client("192.0.2.10", at).key == ("", "Node/node-a")  # a host-network client is its node
    assert index.client("10.244.3.3", at) is egress.UNKNOWN  # that pod started an hour later
    assert index.client("10.244.9.9", at) is egress.UNKNOWN
    nodes = [
        {"metadata": {"name": "node-b"}, "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.11"}]}}
    ]
    assert egress.PodIndex(PODS, nodes).client("192.0.2.11", at).key == ("", "Node/node-b")


def test_the_report_counts_bytes_and_causes_per_workload_and_destination() -> None:
    r = _report()
    web = r.by_workload[("shop", "Deployment/web")]
    assert web["github.com:443"].requests == 2
    assert web["github.com:443"].bytes_from_client == 110
    assert web["github.com:443"].bytes_to_client == 1020
    assert web["registry.npmjs.org:443"].upstream
    assert dict(web["169.254.169.254:80"].refused) == {"filter": 1}
    assert r.by_workload[("", "Node/node-a")]["deb.debian.org:80"].requests == 1
    assert r.unknown_clients == ["10.244.3.3", "10.244.9.9"]
    assert r.lines == 9
    assert r.dropped == 10
    ((_refusal, client),) = r.accept
    assert client.key == ("shop", "Deployment/web")


def test_no_proxy_misses_name_the_workloads_variables_and_each_clients_verdict() -> None:
    r = _report()
    misses = {(m.client.key, m.destination): m for m in r.misses}
    assert set(misses) == {
        (("batch", "Job/report-29000"), "billing.shop.svc.cluster.local:8080"),
        (("batch", "Job/report-29000"), "10.96.0.1:443"),
    }
    by_name = misses[(("batch", "Job/report-29000"), "billing.shop.svc.cluster.local:8080")]
    assert by_name.reason == "the name ends with .svc.cluster.local"
    assert dict(by_name.client.variables)["HTTP_PROXY"] == "http://***@http-proxy.kube-system.svc:8888"
    assert "NO_PROXY" not in dict(by_name.client.variables)
    verdicts = {v.client: v for v in by_name.verdicts}
    assert verdicts["go"].decision == "proxy"
    assert "the pod sets a proxy and no NO_PROXY" in verdicts["go"].why
    api = misses[(("batch", "Job/report-29000"), "10.96.0.1:443")]
    assert api.reason == "in the cluster's ranges or NO_PROXY"
    # Without the settings, by name alone: the API server's address is not found.
    names = {(m.client.key, m.destination) for m in _report(with_settings=False).misses}
    assert names == {(("batch", "Job/report-29000"), "billing.shop.svc.cluster.local:8080")}


def test_a_workload_given_proxy_config_resolves_to_the_rendered_values() -> None:
    settings = parse_settings(SETTINGS)
    no_proxy = settings.no_proxy()
    env = resolve_env(settings, no_proxy, {}, ("ConfigMap/proxy-config",))
    assert ".svc" in env["NO_PROXY"].split(",")
    assert miss_verdicts(settings, no_proxy, env, "http://billing.shop.svc.cluster.local:8080") == []


def test_the_outputs_are_the_same_for_the_lines_in_any_order_and_hold_no_credential() -> None:
    lines = LOG.splitlines()
    outputs = set()
    for seed in range(5):
        random.Random(seed).shuffle(lines)
        log = egress.parse_log("\n".join(lines), "node-a")
        r = egress.report(log, egress.PodIndex(list(reversed(PODS)) if seed % 2 else PODS))
        text = egress.table(r) + egress.dot(r) + egress.suggest(r) + json.dumps(r.as_dict())
        assert PASSWORD not in text
        outputs.add(text)
    assert len(outputs) == 1


def test_the_table_dot_and_suggestions_say_what_was_seen() -> None:
    r = _report()
    table = egress.table(r)
    assert "shop       Deployment/web" in table or "shop" in table
    assert "NO_PROXY misses" in table
    assert "billing.shop.svc.cluster.local:8080" in table
    assert "10 more were not logged" in table
    assert "over the client's share" in table
    graph = egress.dot(r)
    assert graph.startswith("digraph egress {")
    assert '"shop/Deployment/web" -> "dest:github.com:443" [label="2"];' in graph
    assert "color=red" in graph
    suggestions = egress.suggest(r)
    assert "## namespace shop" in suggestions
    assert "(^|\\.)github\\.com$" in suggestions
    assert "# NO_PROXY entries for the misses: .svc.cluster.local" in suggestions or ".svc" in suggestions


def _offline(tmp_path: Path) -> tuple[Path, Path, Path]:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node-a.log").write_text(LOG)
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": PODS}))
    settings = tmp_path / "proxy.yaml"
    settings.write_text(json.dumps(SETTINGS))
    return logs, pods, settings


def test_offline_from_saved_logs_and_pods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs, pods, settings = _offline(tmp_path)
    assert main(["egress", str(settings), "--logs", str(logs), "--pods", str(pods), "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["lines"] == 9
    assert [m["destination"] for m in data["no_proxy_misses"]] == [
        "10.96.0.1:443",
        "billing.shop.svc.cluster.local:8080",
    ]
    assert data["workloads"][0]["namespace"] == ""  # the node first
    assert PASSWORD not in out.out + out.err
    assert main(["egress", "--logs", str(logs), "--pods", str(pods), "--since", "3s"]) == 0
    text = capsys.readouterr().out
    assert "4 connections from 2026-11-28 10:00:01 to 2026-11-28 10:00:04 UTC" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--logs", "x"], "egress --logs: --pods FILE is required"),
        ([], "egress: CONFIG or --stack NAME is required to read a cluster"),
        (["--logs", "LOGS", "--pods", "PODS", "--since", "ten"], "--since: 'ten' is not a duration"),
        (["--logs", "LOGS", "--pods", "MISSING"], "--pods: cannot read"),
        (["--logs", "LOGS", "--pods", "LOGS/node-a.log"], "is not JSON (expected `kubectl get pods -A -o json`)"),
    ],
)
def test_bad_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    logs, pods, _ = _offline(tmp_path)
    real = [
        a.replace("LOGS", str(logs)).replace("PODS", str(pods)).replace("MISSING", str(tmp_path / "no")) for a in args
    ]
    try:
        code = main(["egress", *real])
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_connect_the_kernel_rules_reset_is_named_by_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `connect` failure to an address the proxy's own kernel rules refuse (dataplane/firewall.py) is reported as
    those rules' refusal, by rule; a `connect` failure elsewhere stays `connect`."""
    logs, pods, settings = _offline(tmp_path)
    (logs / "node-a.log").write_text(
        "\n".join(
            [
                access("10.244.1.5", "169.254.169.254", 80, result="error", cause="connect", status=500),
                access("10.244.1.5", "10.96.0.10", 443, result="error", cause="connect", status=500),
                access("10.244.1.5", "198.51.100.7", 443, result="error", cause="connect", status=500),
            ]
        )
        + "\n"
    )
    assert main(["egress", str(settings), "--logs", str(logs), "--pods", str(pods), "--json"]) == 0
    (web,) = [w for w in json.loads(capsys.readouterr().out)["workloads"] if w["workload"] == "Deployment/web"]
    refused = {d["destination"]: d["refused"] for d in web["destinations"]}
    assert refused == {
        "169.254.169.254:80": {"kernel-rules:deny-ranges": 1},
        "10.96.0.10:443": {"kernel-rules:cluster-ranges": 1},
        "198.51.100.7:443": {"connect": 1},
    }
