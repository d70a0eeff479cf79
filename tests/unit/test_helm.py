"""Helm value profiles: exact values per chart, fidelity to the seed documents, and the merge into user values."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.render.env import ProxyValues, env_vars
from proxy_component.render.helm import PROFILES, Profile, UnknownProfileError, helm_values, merge_values

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
    "giantswarm-cluster-values": {"cluster": {"proxy": {"http": HTTP, "https": HTTPS, "noProxy": NO}}, **SNAKE},
    "kapp-controller": {"kappController": {"config": CAMEL}},
    "kyverno": {
        "admissionController": {"container": {"extraEnvVars": ENV}},
        "backgroundController": {"extraEnvVars": ENV},
        "cleanupController": {"extraEnvVars": ENV},
        "reportsController": {"extraEnvVars": ENV},
    },
    "proxy": {"proxy": CAMEL},
    "vsphere-cpi": {"vsphereCPI": SNAKE},
    "vsphere-csi": {"vsphereCSI": SNAKE},
}


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


def test_unknown_profile_names_the_value_and_the_accepted_names() -> None:
    with pytest.raises(UnknownProfileError) as caught:
        helm_values("nginx", VALUES)
    message = (
        "profile: 'nginx' is not a known Helm values profile (expected one of: argo-cd, cert-manager, "
        "cloudzero-agent, env, external-secrets, giantswarm-cluster-values, kapp-controller, kyverno, proxy, "
        "vsphere-cpi, vsphere-csi)"
    )
    assert str(caught.value) == message
    assert caught.value.profile == "nginx"
    assert isinstance(caught.value, KeyError)


def test_the_docs_table_lists_every_profile_and_key() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "helm-profiles.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in doc.splitlines() if line.startswith("| `")}
    assert set(rows) == {f"`{name}`" for name in PROFILES}
    for name, profile in PROFILES.items():
        cells = rows[f"`{name}`"].split("|")
        assert cells[3].strip() == "<br>".join(f"`{key}`" for key in profile.keys), name


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


def test_giantswarm_cluster_values_match_seed_001() -> None:
    expected = seed(SEED_001_CLUSTER_VALUES)
    proxy = expected["cluster"]["proxy"]
    out = helm_values("giantswarm-cluster-values", ProxyValues(proxy["http"], proxy["https"], proxy["noProxy"]))
    assert out["cluster"] == expected["cluster"]
    assert {k: v for k, v in out.items() if k != "cluster"} == {
        "http_proxy": proxy["http"],
        "https_proxy": proxy["https"],
        "no_proxy": proxy["noProxy"],
    }


@pytest.mark.parametrize(("name", "text"), [("vsphere-cpi", SEED_002_CPI), ("vsphere-csi", SEED_002_CSI)])
def test_tkg_vsphere_addon_values_match_seed_002(name: str, text: str) -> None:
    assert helm_values(name, SEED_002) == seed(text)


def test_tkg_kapp_controller_values_match_seed_002() -> None:
    expected = seed(SEED_002_KAPP)
    assert helm_values("kapp-controller", SEED_002)["kappController"]["config"] == expected["kappController"]["config"]
    without_config = copy.deepcopy(expected)
    del without_config["kappController"]["config"]
    assert merge_values(without_config, helm_values("kapp-controller", SEED_002)) == expected


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
    proxy = helm_values("giantswarm-cluster-values", VALUES)
    assert merge_values(user, proxy) == {
        "http_proxy": "http://theirs:3128",
        "cluster": {"proxy": {"noProxy": "theirs", "http": HTTP, "https": HTTPS}, "name": "c1"},
        "a": 1,
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
        helm_values("giantswarm-cluster-values", ProxyValues(http, https, no)),
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
