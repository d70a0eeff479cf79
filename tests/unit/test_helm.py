"""Helm value profiles: exact values per chart, fidelity to the seed documents, and the merge into user values."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.noproxy import Category, Kind, parse_entry
from proxy_component.render import manifests, plain_values
from proxy_component.render.env import ProxyValues, env_vars
from proxy_component.render.helm import (
    PROFILES,
    RENAMED,
    Profile,
    UnknownProfileError,
    check_values_secrets,
    helm_values,
    merge_values,
    profile_no_proxy,
    profile_values,
    values_yaml,
)
from proxy_component.settings import NetworkValues, SettingsError, parse_settings

HTTP = "http://http-proxy.kube-system.svc:8888"
HTTPS = "http://https-proxy.corp.example:8443"
NO = ".svc,.cluster.local,10.0.0.0/8,localhost,127.0.0.1"
VALUES = ProxyValues(HTTP, HTTPS, NO)

ENV = [
    {"name": "HTTP_PROXY", "value": HTTP},
    {"name": "http_proxy", "value": HTTP},
    {"name": "HTTPS_PROXY", "value": HTTPS},
    {"name": "https_proxy", "value": HTTPS},
    {"name": "NO_PROXY", "value": NO},
    {"name": "no_proxy", "value": NO},
]
SNAKE = {"http_proxy": HTTP, "https_proxy": HTTPS, "no_proxy": NO}
CAMEL = {"httpProxy": HTTP, "httpsProxy": HTTPS, "noProxy": NO}

EXPECTED: dict[str, dict[str, Any]] = {
    "argo-cd": {
        "applicationSet": {"extraEnv": ENV},
        "commitServer": {"extraEnv": ENV},
        "controller": {"env": ENV},
        "dex": {"env": ENV},
        "notifications": {"extraEnv": ENV},
        "repoServer": {"env": ENV},
        "server": {"env": ENV},
    },
    "cert-manager": SNAKE,
    "cloudzero-agent": {"defaults": {"env": ENV}},
    "env": {"env": ENV},
    "external-secrets": {"extraEnv": ENV},
    "giantswarm-cluster-values": {"cluster": {"proxy": {"http": HTTP, "https": HTTPS, "noProxy": NO}}, "env": ENV},
    "kyverno": {
        "admissionController": {"container": {"extraEnvVars": ENV}},
        "backgroundController": {"extraEnvVars": ENV},
        "cleanupController": {"extraEnvVars": ENV},
        "reportsController": {"extraEnvVars": ENV},
    },
    "proxy": {"proxy": CAMEL},
    "tkg-kapp-controller": {"kappController": {"config": CAMEL}},
    "tkg-vsphere-cpi": {"vsphereCPI": SNAKE},
    "tkg-vsphere-csi": {"vsphereCSI": SNAKE},
}


# The short Service names each chart's components call each other by (release `argocd` for Argo CD).
HOSTS: dict[str, tuple[str, ...]] = {
    "argo-cd": (
        "argocd-commit-server",
        "argocd-dex-server",
        "argocd-redis",
        "argocd-redis-ha-haproxy",
        "argocd-repo-server",
    ),
    "cert-manager": (),
    "cloudzero-agent": (),
    "env": (),
    "external-secrets": (),
    "giantswarm-cluster-values": (),
    "kyverno": (),
    "proxy": (),
    "tkg-kapp-controller": (),
    "tkg-vsphere-cpi": (),
    "tkg-vsphere-csi": (),
}

CLUSTER_SETTINGS: dict[str, Any] = {
    "cluster": {
        "podCidrs": ["10.244.0.0/16"],
        "serviceCidrs": ["10.96.0.0/12"],
        "apiServerIps": ["10.96.0.1"],
        "cloud": "aws",
    },
    "proxy": {"noProxy": ["registry.corp"]},
}
CLUSTER_NO_PROXY = (
    "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,10.96.0.0/12,"
    "10.244.0.0/16,10.96.0.1,169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254,registry.corp,.registry.corp"
)


class Opaque:
    """Stands in for a `pulumi.Output`: a builder or the merge that looks inside it fails the test."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __bool__(self) -> bool:
        raise AssertionError(f"looked inside {self.label}")

    def __str__(self) -> str:
        raise AssertionError(f"looked inside {self.label}")

    def __iter__(self) -> Iterator[Any]:
        raise AssertionError(f"looked inside {self.label}")

    def __len__(self) -> int:
        raise AssertionError(f"looked inside {self.label}")


def leaf_paths(tree: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of everything that is not a mapping (env lists count as one leaf)."""
    paths: set[str] = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        paths |= leaf_paths(value, f"{path}.") if isinstance(value, Mapping) else {path}
    return paths


def value_at(tree: Mapping[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        node = node[part]
    return node


# --- the catalog ---------------------------------------------------------------------------------


def test_profile_names_are_sorted_and_complete() -> None:
    assert list(PROFILES) == sorted(EXPECTED)
    assert all(name == profile.name for name, profile in PROFILES.items())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_values_exactly(name: str) -> None:
    assert helm_values(name, VALUES) == EXPECTED[name]


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_documented_keys_are_exactly_what_is_set(profile: Profile) -> None:
    out = helm_values(profile.name, VALUES)
    assert len(set(profile.keys)) == len(profile.keys)
    assert leaf_paths(out) == set(profile.keys)


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_every_leaf_is_one_of_the_three_values_or_the_env_list(profile: Profile) -> None:
    out = helm_values(profile.name, VALUES)
    for path in profile.keys:
        assert value_at(out, path) in (HTTP, HTTPS, NO, env_vars(VALUES)), path
    leaves = [value_at(out, path) for path in profile.keys]
    scalars = [leaf for leaf in leaves if not isinstance(leaf, list)]
    if scalars:
        assert sorted(scalars) == sorted([HTTP, HTTPS, NO] * (len(scalars) // 3))


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_each_profile_says_where_its_keys_were_verified(profile: Profile) -> None:
    assert profile.chart
    assert profile.description
    assert profile.source
    for path in profile.keys:
        assert path.split(".")[-1] in profile.source or path.startswith(("env", "proxy.")), path


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_builders_place_opaque_leaves_by_identity(profile: Profile) -> None:
    http, https, no = Opaque("http"), Opaque("https"), Opaque("no")
    out = helm_values(profile.name, ProxyValues(http, https, no))
    by_label = {"HTTP_PROXY": http, "HTTPS_PROXY": https, "NO_PROXY": no}
    for path in profile.keys:
        leaf = value_at(out, path)
        if isinstance(leaf, list):
            assert [entry["name"] for entry in leaf] == [entry["name"] for entry in ENV]
            assert all(entry["value"] is by_label[entry["name"].upper()] for entry in leaf)
        else:
            assert leaf is http or leaf is https or leaf is no


def test_env_lists_are_not_shared_between_components_or_calls() -> None:
    first = helm_values("argo-cd", VALUES)
    second = helm_values("argo-cd", VALUES)
    lists = [value_at(first, path) for path in PROFILES["argo-cd"].keys]
    assert len({id(item) for item in lists}) == len(lists)
    first["server"]["env"].append({"name": "EXTRA", "value": "x"})
    assert second["server"]["env"] == ENV
    assert helm_values("argo-cd", VALUES)["server"]["env"] == ENV


# --- each profile's own NO_PROXY: the cluster's entries plus its chart's host names --------------------------


def no_proxy_leaves(out: Mapping[str, Any], profile: Profile) -> list[str]:
    """Every NO_PROXY value a profile's values carry (both spellings of env lists, and scalar keys)."""
    found: list[str] = []
    for path in profile.keys:
        leaf = value_at(out, path)
        if isinstance(leaf, list):
            found += [entry["value"] for entry in leaf if entry["name"].upper() == "NO_PROXY"]
        elif path.split(".")[-1] in ("no_proxy", "noProxy"):
            found.append(leaf)
    assert found, profile.name
    return found


def test_each_profile_declares_exactly_its_charts_hosts() -> None:
    assert {name: profile.hosts for name, profile in PROFILES.items()} == HOSTS


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_hosts_are_plain_names_that_the_source_text_names(profile: Profile) -> None:
    assert "Hosts: " in profile.source or "Hosts: " in profile.description
    for host in profile.hosts:
        entry = parse_entry(host)
        assert (entry.kind, entry.value, entry.port) == (Kind.HOST, host, None)
        assert host in profile.source, host


def test_argo_cd_no_proxy_holds_the_clusters_entries_then_its_service_names() -> None:
    settings = parse_settings(CLUSTER_SETTINGS)
    out = helm_values("argo-cd", profile_values(settings, "argo-cd"))
    expected = CLUSTER_NO_PROXY + "," + ",".join(HOSTS["argo-cd"])
    leaves = no_proxy_leaves(out, PROFILES["argo-cd"])
    assert len(leaves) == 14  # seven components, two spellings each
    assert set(leaves) == {expected}
    tokens = expected.split(",")
    for name in ("argocd-repo-server", "argocd-redis", "argocd-dex-server", "argocd-commit-server"):
        assert name in tokens
    assert out["repoServer"]["env"][0] == {"name": "HTTP_PROXY", "value": settings.http_proxy}


def test_the_chart_names_have_their_own_category_and_origin() -> None:
    composed = profile_no_proxy(parse_settings(CLUSTER_SETTINGS), "argo-cd")
    charts = [e for e in composed.entries if e.category is Category.CHART]
    assert [e.value for e in charts] == list(HOSTS["argo-cd"])
    assert all(e.origins == ("helm profile argo-cd",) for e in charts)
    assert composed.entries[-len(charts) :] == tuple(charts)
    line = next(line for line in composed.explain() if line.startswith("argocd-repo-server "))
    assert line.split()[1:] == ["chart", "helm", "profile", "argo-cd"]


def test_a_name_the_user_already_lists_appears_once_with_both_origins() -> None:
    settings = parse_settings({"proxy": {"noProxy": ["argocd-repo-server", "ARGOCD-REDIS"]}})
    composed = profile_no_proxy(settings, "argo-cd")
    tokens = str(composed).split(",")
    assert tokens.count("argocd-repo-server") == 1
    assert tokens.count("argocd-redis") == 1
    entry = next(e for e in composed.entries if e.value == "argocd-repo-server")
    assert entry.category is Category.USER
    assert entry.origins == ("helm profile argo-cd", "proxy.noProxy[0]")


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_a_profiles_names_appear_only_in_its_own_values(profile: Profile) -> None:
    settings = parse_settings(CLUSTER_SETTINGS)
    tokens = set(str(profile_no_proxy(settings, profile.name)).split(","))
    others = {host for name, hosts in HOSTS.items() if name != profile.name for host in hosts}
    assert set(HOSTS[profile.name]) <= tokens
    assert not tokens & others
    assert tokens - set(HOSTS[profile.name]) == set(CLUSTER_NO_PROXY.split(","))
    for leaf in no_proxy_leaves(helm_values(profile.name, profile_values(settings, profile.name)), profile):
        assert leaf == str(profile_no_proxy(settings, profile.name))


def test_the_cluster_wide_no_proxy_keeps_no_chart_names() -> None:
    settings = parse_settings(CLUSTER_SETTINGS)
    for name in PROFILES:
        profile_no_proxy(settings, name)
    assert str(settings.no_proxy()) == CLUSTER_NO_PROXY
    assert plain_values(settings).no_proxy == CLUSTER_NO_PROXY
    assert all(e.category is not Category.CHART for e in settings.no_proxy().entries)


def test_profile_no_proxy_composes_the_run_time_network_too() -> None:
    settings = parse_settings({})
    network = NetworkValues(origin="eks", pod_cidrs=["10.1.0.0/16"], service_cidrs=["172.20.0.0/16"])
    tokens = str(profile_no_proxy(settings, "argo-cd", network)).split(",")
    assert tokens[tokens.index("172.20.0.0/16") + 1] == "10.1.0.0/16"
    assert tokens[-5:] == list(HOSTS["argo-cd"])
    assert str(profile_no_proxy(settings, "cert-manager", network)) == str(settings.no_proxy(network))


def test_values_yaml_of_argo_cd_carries_the_names() -> None:
    settings = parse_settings(CLUSTER_SETTINGS)
    loaded = yaml.safe_load(values_yaml("argo-cd", profile_values(settings, "argo-cd")))
    no_proxy = {e["name"]: e["value"] for e in loaded["controller"]["env"]}["NO_PROXY"]
    assert no_proxy.endswith(",argocd-redis,argocd-redis-ha-haproxy,argocd-repo-server")


def test_profile_no_proxy_refuses_an_unknown_profile() -> None:
    with pytest.raises(UnknownProfileError):
        profile_no_proxy(parse_settings({}), "nginx")


def test_unknown_profile_names_the_value_and_the_accepted_names() -> None:
    with pytest.raises(UnknownProfileError) as caught:
        helm_values("nginx", VALUES)
    message = (
        "profile: 'nginx' is not a known Helm values profile (expected one of: argo-cd, cert-manager, "
        "cloudzero-agent, env, external-secrets, giantswarm-cluster-values, kyverno, proxy, tkg-kapp-controller, "
        "tkg-vsphere-cpi, tkg-vsphere-csi)"
    )
    assert str(caught.value) == message
    assert caught.value.profile == "nginx"
    assert isinstance(caught.value, KeyError)


def test_the_docs_table_lists_every_profile_and_key() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "helm-profiles.md").read_text()
    section = doc.split("\n## Profiles\n", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| `")}
    assert list(rows) == [f"`{name}`" for name in PROFILES]
    for name, profile in PROFILES.items():
        cells = rows[f"`{name}`"].split("|")
        assert cells[3].strip() == "<br>".join(f"`{key}`" for key in profile.keys), name
        hosts = "<br>".join(f"`{host}`" for host in profile.hosts) or "none"
        assert cells[-2].strip().endswith(hosts) or cells[-2].strip().startswith(f"{hosts} ("), name


# --- fidelity to the seed documents ----------------------------------------------------------------

SEED_001_CLUSTER_VALUES = """
cluster:
  proxy:
    http: http://myProxyUser:mySuperSecretPassword@192.168.52.220:3128
    https: http://myProxyUser:mySuperSecretPassword@192.168.52.220:3128
    noProxy: cluster.local,100.64.0.0/13,100.96.0.0/11,178.170.32.59,172.16.0.0/16,internal.corpdomain.net,example.com,svc,127.0.0.1,localhost
"""

SEED_002_NO_PROXY = ".svc.cluster.local,.svc,localhost,127.0.0.1,100.64.0.0/13,100.96.0.0/11"
SEED_002 = ProxyValues("http://asdf", "https://asdf2", SEED_002_NO_PROXY)

SEED_002_CPI = """
vsphereCPI:
  http_proxy: http://asdf
  https_proxy: https://asdf2
  no_proxy: .svc.cluster.local,.svc,localhost,127.0.0.1,100.64.0.0/13,100.96.0.0/11
"""

SEED_002_CSI = """
vsphereCSI:
  http_proxy: http://asdf
  https_proxy: https://asdf2
  no_proxy: .svc.cluster.local,.svc,localhost,127.0.0.1,100.64.0.0/13,100.96.0.0/11
"""

SEED_002_KAPP = """
kappController:
  namespace: tkg-system
  createNamespace: true
  globalNamespace: tanzu-package-repo-global
  image:
  deployment:
  config:
    httpProxy: http://asdf
    httpsProxy: https://asdf2
    noProxy: .svc.cluster.local,.svc,localhost,127.0.0.1,100.64.0.0/13,100.96.0.0/11
"""

SEED_003_EKS = """
defaults:
  env:
    - name: HTTPS_PROXY
      value: "http://proxy.internal.example.com:3128"
    - name: HTTP_PROXY
      value: "http://proxy.internal.example.com:3128"
    - name: NO_PROXY
      value: "localhost,127.0.0.1,169.254.169.254,cluster.local,10.0.0.0/8,172.20.0.0/16"
"""

SEED_000_URL = "http://http-proxy.kube-system.svc.k8s.internal:8888"
SEED_000_NO_PROXY = ".k8s.internal,.svc,localhost,127.0.0.1,10.0.0.0/8,fd00::/8"

SEED_000_HELM = """
env:
  - name: HTTPS_PROXY
    value: "http://http-proxy.kube-system.svc.k8s.internal:8888"
  - name: HTTP_PROXY
    value: "http://http-proxy.kube-system.svc.k8s.internal:8888"
  - name: NO_PROXY
    value: ".k8s.internal,.svc,localhost,127.0.0.1,10.0.0.0/8,fd00::/8"

proxy:
  httpProxy: "http://http-proxy.kube-system.svc.k8s.internal:8888"
  httpsProxy: "http://http-proxy.kube-system.svc.k8s.internal:8888"
  noProxy: ".k8s.internal,.svc,localhost,127.0.0.1,10.0.0.0/8,fd00::/8"
"""


def seed(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def with_lower_case_twins(env: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return sorted([(e["name"], e["value"]) for e in env] + [(e["name"].lower(), e["value"]) for e in env])


def test_giantswarm_cluster_values_match_seed_001_plus_the_env_list() -> None:
    expected = seed(SEED_001_CLUSTER_VALUES)
    proxy = expected["cluster"]["proxy"]
    values = ProxyValues(proxy["http"], proxy["https"], proxy["noProxy"])
    out = helm_values("giantswarm-cluster-values", values)
    assert list(out) == ["cluster", "env"]
    assert out["cluster"] == expected["cluster"]
    # What cluster-apps-operator writes for charts with a top-level env (external-dns-app), in both spellings.
    assert out["env"] == env_vars(values)
    assert {e["name"]: e["value"] for e in out["env"]}["NO_PROXY"] == proxy["noProxy"]


@pytest.mark.parametrize(("name", "text"), [("tkg-vsphere-cpi", SEED_002_CPI), ("tkg-vsphere-csi", SEED_002_CSI)])
def test_tkg_vsphere_addon_values_match_seed_002(name: str, text: str) -> None:
    assert helm_values(name, SEED_002) == seed(text)


def test_tkg_kapp_controller_values_match_seed_002() -> None:
    expected = seed(SEED_002_KAPP)
    out = helm_values("tkg-kapp-controller", SEED_002)
    assert out["kappController"]["config"] == expected["kappController"]["config"]
    without_config = copy.deepcopy(expected)
    del without_config["kappController"]["config"]
    assert merge_values(without_config, helm_values("tkg-kapp-controller", SEED_002)) == expected


def test_cloudzero_defaults_env_matches_seed_003_with_lower_case_twins() -> None:
    expected = seed(SEED_003_EKS)["defaults"]["env"]
    url, no_proxy = expected[0]["value"], expected[2]["value"]
    out = helm_values("cloudzero-agent", ProxyValues(url, url, no_proxy))
    assert list(out) == ["defaults"]
    assert list(out["defaults"]) == ["env"]
    assert sorted((e["name"], e["value"]) for e in out["defaults"]["env"]) == with_lower_case_twins(expected)


def test_generic_env_and_proxy_match_seed_000() -> None:
    expected = seed(SEED_000_HELM)
    values = ProxyValues(SEED_000_URL, SEED_000_URL, SEED_000_NO_PROXY)
    assert helm_values("proxy", values) == {"proxy": expected["proxy"]}
    env = helm_values("env", values)
    assert list(env) == ["env"]
    assert sorted((e["name"], e["value"]) for e in env["env"]) == with_lower_case_twins(expected["env"])


# --- merge into user values ---------------------------------------------------------------------------


def test_user_scalars_win_and_nested_mappings_merge() -> None:
    user = {"http_proxy": "http://theirs:3128", "cluster": {"proxy": {"noProxy": "theirs"}, "name": "c1"}, "a": 1}
    proxy = merge_values(helm_values("giantswarm-cluster-values", VALUES), helm_values("cert-manager", VALUES))
    assert merge_values(user, proxy) == {
        "http_proxy": "http://theirs:3128",
        "cluster": {"proxy": {"noProxy": "theirs", "http": HTTP, "https": HTTPS}, "name": "c1"},
        "a": 1,
        "env": ENV,
        "https_proxy": HTTPS,
        "no_proxy": NO,
    }


def test_env_entries_are_appended_once_and_user_entries_win() -> None:
    user = {
        "server": {
            "env": [{"name": "HTTP_PROXY", "value": "http://theirs:3128"}, {"name": "TZ", "value": "UTC"}],
            "replicas": 2,
        },
        "repoServer": {"env": []},
    }
    merged = merge_values(user, helm_values("argo-cd", VALUES))
    assert merged["server"] == {
        "env": [
            {"name": "HTTP_PROXY", "value": "http://theirs:3128"},
            {"name": "TZ", "value": "UTC"},
            *[entry for entry in ENV if entry["name"] != "HTTP_PROXY"],
        ],
        "replicas": 2,
    }
    assert merged["repoServer"] == {"env": ENV}
    assert merged["controller"] == {"env": ENV}
    assert merge_values(merged, helm_values("argo-cd", VALUES)) == merged


def test_other_lists_and_type_mismatches_keep_the_user_value() -> None:
    user = {
        "extraEnv": ["not", "env"],
        "defaults": {"env": [{"name": "A", "value": "1"}, {"valueFrom": {}}]},
        "proxy": "disabled",
        "env": {"HTTP_PROXY": "map-style"},
    }
    merged = merge_values(user, merge_values(helm_values("external-secrets", VALUES), helm_values("proxy", VALUES)))
    merged = merge_values(merged, merge_values(helm_values("cloudzero-agent", VALUES), helm_values("env", VALUES)))
    assert merged == user


def test_proxy_only_keys_are_added_and_the_user_key_order_comes_first() -> None:
    merged = merge_values({"replicaCount": 2}, helm_values("cert-manager", VALUES))
    assert list(merged) == ["replicaCount", "http_proxy", "https_proxy", "no_proxy"]


def test_merge_does_not_mutate_or_alias_its_inputs() -> None:
    user: dict[str, Any] = {"server": {"env": [{"name": "TZ", "value": "UTC"}]}, "global": {"domain": "a.example"}}
    proxy = helm_values("argo-cd", VALUES)
    user_before, proxy_before = copy.deepcopy(user), copy.deepcopy(proxy)
    merged = merge_values(user, proxy)
    assert user == user_before
    assert proxy == proxy_before
    merged["server"]["env"][0]["value"] = "changed"
    merged["server"]["env"].append({"name": "X", "value": "y"})
    merged["global"]["domain"] = "changed"
    merged["controller"]["env"][0]["value"] = "changed"
    assert user == user_before
    assert proxy == proxy_before


def test_merge_keeps_opaque_leaves_by_identity() -> None:
    http, https, no = Opaque("http"), Opaque("https"), Opaque("no")
    theirs_http, theirs_tz = Opaque("user http"), Opaque("user tz")
    user = {
        "http_proxy": theirs_http,
        "extraEnv": [{"name": "TZ", "value": theirs_tz}],
        "cluster": {"proxy": {"https": theirs_http}},
    }
    proxy = merge_values(
        merge_values(
            helm_values("giantswarm-cluster-values", ProxyValues(http, https, no)),
            helm_values("cert-manager", ProxyValues(http, https, no)),
        ),
        helm_values("external-secrets", ProxyValues(http, https, no)),
    )
    merged = merge_values(user, proxy)
    assert merged["http_proxy"] is theirs_http
    assert merged["https_proxy"] is https
    assert merged["no_proxy"] is no
    assert merged["cluster"]["proxy"]["https"] is theirs_http
    assert merged["cluster"]["proxy"]["http"] is http
    assert merged["cluster"]["proxy"]["noProxy"] is no
    assert merged["extraEnv"][0]["value"] is theirs_tz
    values = {entry["name"]: entry["value"] for entry in merged["extraEnv"][1:]}
    assert list(values) == [entry["name"] for entry in ENV]
    assert all(values[name] is {"HTTP": http, "HTTPS": https, "NO": no}[name.split("_")[0].upper()] for name in values)


# --- release names, the cluster domain, renamed profiles, left-out containers ------------------------------------


@pytest.mark.parametrize(
    ("release", "names"),
    [
        ("argocd", HOSTS["argo-cd"]),
        ("my-release", ("my-release-argocd-commit-server", "my-release-argocd-dex-server", "my-release-argocd-redis",
                        "my-release-argocd-repo-server", "my-release-redis-ha-haproxy")),
        # Does not contain "argocd" (nameOverride), so the chart appends it.
        ("argo-cd", ("argo-cd-argocd-commit-server", "argo-cd-argocd-dex-server", "argo-cd-argocd-redis",
                     "argo-cd-argocd-repo-server", "argo-cd-redis-ha-haproxy")),
        ("team-argocd-prod", ("team-argocd-prod-commit-server", "team-argocd-prod-dex-server", "team-argocd-prod-redis",
                              "team-argocd-prod-redis-ha-haproxy", "team-argocd-prod-repo-server")),
        ("redis-ha-argocd", ("redis-ha-argocd-commit-server", "redis-ha-argocd-dex-server", "redis-ha-argocd-haproxy",
                             "redis-ha-argocd-redis", "redis-ha-argocd-repo-server")),
    ],
)  # fmt: skip
def test_argo_cds_names_follow_the_release_name(release: str, names: tuple[str, ...]) -> None:
    assert PROFILES["argo-cd"].names(release) == names
    tokens = str(profile_no_proxy(parse_settings(CLUSTER_SETTINGS), "argo-cd", release=release)).split(",")
    assert tokens == [*CLUSTER_NO_PROXY.split(","), *names]


def test_argo_cds_names_are_cut_at_63_characters_like_the_charts() -> None:
    names = PROFILES["argo-cd"].names("a" * 50)
    assert all(len(name) <= 63 and not name.endswith("-") for name in names)
    # <release>-argocd-repo-server is 69 characters: cut at 63 it ends in "-", which the chart trims.
    assert "a" * 50 + "-argocd-repo" in names


def test_a_release_name_is_checked() -> None:
    settings = parse_settings({})
    with pytest.raises(ValueError, match=r"'Argo' is not a DNS-1123 label"):
        profile_no_proxy(settings, "argo-cd", release="Argo")
    with pytest.raises(ValueError, match=r"has 54 characters, and Helm refuses release names longer than 53"):
        profile_values(settings, "argo-cd", release="a" * 54)


def test_the_release_changes_nothing_for_profiles_whose_names_do_not_derive_from_it() -> None:
    settings = parse_settings(CLUSTER_SETTINGS)
    for name in PROFILES:
        if name != "argo-cd":
            assert str(profile_no_proxy(settings, name, release="my-release")) == str(profile_no_proxy(settings, name))


@pytest.mark.parametrize(
    ("domain", "added"),
    [
        ("cluster.local", []),
        ("k8s.internal", ["svc.cluster.local", ".svc.cluster.local"]),
        ("corp.cluster.local", ["svc.cluster.local", ".svc.cluster.local"]),
        ("local", []),
    ],
)
def test_cloudzero_adds_svc_cluster_local_unless_the_cluster_domain_covers_it(domain: str, added: list[str]) -> None:
    settings = parse_settings({**CLUSTER_SETTINGS, "cluster": {**CLUSTER_SETTINGS["cluster"], "dnsDomain": domain}})
    cluster = str(settings.no_proxy()).split(",")
    assert str(profile_no_proxy(settings, "cloudzero-agent")).split(",") == cluster + added
    for name in ("cloudzero-cz-aggregator.tools.svc.cluster.local", "kubernetes.default.svc.cluster.local"):
        tokens = str(profile_no_proxy(settings, "cloudzero-agent")).split(",")
        assert any(name == t.lstrip(".") or name.endswith("." + t.lstrip(".")) for t in tokens), (domain, name)


@pytest.mark.parametrize(("old", "new"), [("kapp-controller", "tkg-kapp-controller"), ("vsphere-cpi", "tkg-vsphere-cpi"),
                                          ("vsphere-csi", "tkg-vsphere-csi")])  # fmt: skip
def test_renamed_profiles_are_refused_naming_the_new_name(old: str, new: str) -> None:
    assert RENAMED[old] == new
    assert old not in PROFILES
    message = (
        f"{old!r} was renamed {new!r} in 0.2.0: its values are TKG addon data values (read by ytt when TKG installs "
        f"the addon), and a Helm chart named {old} accepts them and does nothing"
    )
    with pytest.raises(UnknownProfileError) as caught:
        helm_values(old, VALUES)
    assert str(caught.value) == f"profile: {message}"
    with pytest.raises(UnknownProfileError):
        profile_no_proxy(parse_settings({}), old)
    with pytest.raises(SettingsError) as refused:
        check_values_secrets(parse_settings({"helmValuesSecrets": [{"profile": old, "namespace": "apps"}]}))
    assert f"helmValuesSecrets (profile {old}, namespace apps).profile: {message}" in str(refused.value)


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.name)
def test_left_out_entries_name_a_workload_a_container_and_a_reason(profile: Profile) -> None:
    for entry in profile.left_out:
        workload, _, container = entry.pattern.partition("/")
        assert workload, entry
        assert container, entry
        assert "/" not in container, entry
        assert len(entry.reason) > 20, entry


def test_a_values_secret_carries_the_names_of_its_release() -> None:
    settings = parse_settings(
        {
            **CLUSTER_SETTINGS,
            "helmValuesSecrets": [
                {"profile": "argo-cd", "namespace": "argocd"},
                {"profile": "argo-cd", "namespace": "cd", "name": "mine", "release": "my-release"},
            ],
        }
    )
    secrets = {
        o["metadata"]["namespace"]: yaml.safe_load(o["stringData"]["values.yaml"])
        for o in manifests(settings)
        if o["kind"] == "Secret" and "values.yaml" in o.get("stringData", {})
    }
    no_proxy = {ns: {e["name"]: e["value"] for e in v["server"]["env"]}["NO_PROXY"] for ns, v in secrets.items()}
    assert no_proxy["argocd"] == str(profile_no_proxy(settings, "argo-cd"))
    assert no_proxy["cd"] == str(profile_no_proxy(settings, "argo-cd", release="my-release"))
    assert no_proxy["cd"].endswith(",my-release-argocd-repo-server,my-release-redis-ha-haproxy")


def test_a_release_name_in_the_settings_is_checked() -> None:
    with pytest.raises(SettingsError, match=r"helmValuesSecrets\[0\]\.release: 'My' is not a DNS-1123 label"):
        parse_settings({"helmValuesSecrets": [{"profile": "argo-cd", "namespace": "cd", "release": "My"}]})


def test_a_values_secret_whose_namespace_gets_no_trust_bundle_is_refused_naming_the_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a trusted CA the argo-cd values mount proxy-trust: a namespace without it would keep the pods from
    starting. The env profile mounts nothing and is fine anywhere."""
    from proxy_component.cli import main
    from tests.pki import make_ca

    settings = {
        "proxy": {"upstream": {"url": "http://proxy.corp:3128", "trustedCa": make_ca().cert_pem}},
        "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
        "namespaces": ["apps"],
        "helmValuesSecrets": [{"profile": "env", "namespace": "argocd"}, {"profile": "argo-cd", "namespace": "argocd"}],
    }
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump(settings))
    assert main(["render", str(config)]) == 2
    err = capsys.readouterr().err
    assert "helmValuesSecrets (profile argo-cd, namespace argocd).namespace: 'argocd' gets no proxy-trust" in err
    assert "profile env" not in err
    settings["namespaces"] = ["apps", "argocd"]
    config.write_text(yaml.safe_dump(settings))
    assert main(["render", str(config)]) == 0
    out = capsys.readouterr().out
    assert "proxy-trust" in out


def test_the_docs_list_each_profiles_trust_keys() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "helm-profiles.md").read_text()
    section = doc.split("\n## With a trusted CA", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in section.splitlines() if "| `" in line}
    assert rows == {
        f"`{name}`": "<br>".join(f"`{key}`" for key in p.trust_keys) for name, p in PROFILES.items() if p.trust_keys
    }


def test_a_bad_values_secret_is_named_by_what_it_holds_whatever_its_position() -> None:
    """The settings sort the entries, so an index would point at another entry than the user's."""
    entries = [{"profile": "nginx", "namespace": "zeta"}, {"profile": "argo-cd", "namespace": "alpha"}]
    for order in (entries, entries[::-1]):
        with pytest.raises(SettingsError) as refused:
            check_values_secrets(parse_settings({"helmValuesSecrets": order}))
        (problem,) = refused.value.problems
        assert problem.startswith("helmValuesSecrets (profile nginx, namespace zeta).profile: 'nginx' is not a known")


def test_the_tls_doc_names_exactly_the_profiles_that_carry_the_trust_group() -> None:
    """docs/tls-inspecting-proxy.md said no profile carries the trust group; those with `trust_keys` do."""
    doc = (Path(__file__).resolve().parents[2] / "docs/tls-inspecting-proxy.md").read_text()
    bullet = " ".join(doc.split("\n- Helm: ", 1)[1].split("\n- ", 1)[0].split())
    named = bullet.split("(", 1)[1].split(")", 1)[0]
    assert sorted(n.strip(" `") for n in named.split(",")) == sorted(p for p in PROFILES if PROFILES[p].trust_keys)
    assert "not wired into the profiles" not in bullet
