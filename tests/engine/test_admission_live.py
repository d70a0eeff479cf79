"""Injection by the API server itself, against the test cluster's real kube-apiserver (scripts/cluster, v1.36.3,
with kwok's kube-controller-manager): the MutatingAdmissionPolicy of `render --format admission` applied with
kubectl, then every case of the shared table (tests/fixtures/injection-cases.yaml) created as a Pod with kubectl,
and some as a Deployment (its Pods made by the real ReplicaSet controller) and a Job (by the Job controller); each
comes out of admission exactly as the stack transform renders it, env by env and mount by mount, order included.
Ephemeral containers are added through `pods/ephemeralcontainers` as `kubectl debug` adds them. Last, the API
server's own `paramKind` defect, which the policy's design avoids, reproduced (kubernetes/kubernetes#130887).

On every supported version: the default one, and each older one (tests/kwok_cluster.py OLDER, 1.36 and 1.35,
`pytest -m older`), each with what the product renders for that cluster (`cluster.kubernetesVersion: "1.36"` or
`"1.35"` there; on 1.35 the v1beta1 policy, served by kube-apiserver with the MutatingAdmissionPolicy feature gate
on).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from proxy_component.render import plain_values
from proxy_component.render.admission import POD_CREATE, POLICY_NAME, admission_api_version
from proxy_component.render.digest import settings_digest
from proxy_component.settings import Settings, parse_settings
from proxy_component.settings.injection import CLUSTER_TRUST_BUNDLE_MINOR
from proxy_component.transform import proxy_env_transform
from tests.injection_cases import (
    Case,
    cases,
    container_parts,
    ephemeral_cases,
    ephemeral_transformed,
    injected_parts,
    namespaces,
    profile_raw,
    profiles,
    stamp,
    transformed,
)
from tests.kwok_cluster import (
    ADMISSION_GA_MINOR,
    VERSIONS,
    PodRefusedError,
    Pods,
    kwok_cluster,
    minor,
    settings_version,
)

from .conftest import ROOT

NODES = 1
# The v1beta1 API of 1.34 and 1.35 is still served by 1.36 when enabled: the rendering for those clusters is applied
# to this API server too (kube-apiserver 1.36 enables the MutatingAdmissionPolicy admission plugin and v1 by default).
KWOKCTL = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  kubeRuntimeConfig: admissionregistration.k8s.io/v1beta1=true
"""


class Cluster:
    def __init__(self, kubeconfig: Path, workdir: Path, version: str | None) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.pods = Pods(kubeconfig)  # the tables' Pods, in process
        # What the settings name for this cluster (`cluster.kubernetesVersion`): unset on the default version, '1.35'
        # on OLDEST; and the minor of an older cluster whose rendering this one serves too (one upgraded since).
        self.settings_version = settings_version(version)
        self.minor = minor(version)  # None on the default version (the newest)
        self.older = "1.35" if version is None else f"1.{(minor(version) or 0) - 1}"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            # Its own discovery cache: kubectl's shared one may hold an earlier cluster's on the same port.
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.workdir / "kube-cache"), *args],
            input=stdin, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert not check or result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, objects: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def render_admission(self, raw: dict[str, Any], name: str) -> str:
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        result = subprocess.run(
            [sys.executable, "-m", "proxy_component.cli", "render", str(path), "--format", "admission"],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout


def kyverno_crd(kind: str, plural: str) -> dict[str, Any]:
    """Kyverno's policies.kyverno.io/v1 CRD of `kind`, its schema from tests/fixtures/crds (Kyverno v1.19.1's)."""
    schema = yaml.safe_load((ROOT / f"tests/fixtures/crds/kyverno-{kind.lower()}-v1.yaml").read_text())
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.policies.kyverno.io"},
        "spec": {
            "group": "policies.kyverno.io",
            "scope": "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    version: str | None = request.param
    workdir = tmp_path_factory.mktemp("admission")
    name = "pc-admission" if version is None else f"pc-admission-{minor(version)}"
    with kwok_cluster(workdir, name, NODES, KWOKCTL, version) as kubeconfig:
        live = Cluster(kubeconfig, workdir, version)
        for namespace in namespaces():
            if namespace != "kube-system":
                live.kubectl("create", "namespace", namespace)
        crds = [
            kyverno_crd("MutatingPolicy", "mutatingpolicies"),
            kyverno_crd("GeneratingPolicy", "generatingpolicies"),
        ]
        live.apply(crds)
        for crd in crds:  # `kubectl wait` fails outright while the CRD has no conditions yet

            def established(name: str = crd["metadata"]["name"]) -> bool:
                conditions = live.get("crd", name).get("status", {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

            _wait(established, f"the CRD {crd['metadata']['name']} established")
        yield live


def _probe_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"automountServiceAccountToken": False, "containers": [{"name": "app", "image": "app"}]},
    }


REFUSED: list[str] = []  # the API server's last refusal of the probe Pod


def _admitted_env(cluster: Cluster) -> list[dict[str, Any]] | None:
    """A Pod's env as admission makes it now, without creating it (server-side dry run runs admission); None when
    admission refuses it (the reason kept in REFUSED)."""
    try:
        admitted = cluster.pods.create(_probe_pod("probe"), dry_run=True)
    except PodRefusedError as e:
        REFUSED[:] = [str(e)]
        return None
    env: list[dict[str, Any]] = admitted["spec"]["containers"][0].get("env") or []
    return env


def _in_force(cluster: Cluster, settings: Settings) -> None:
    """Wait until the API server admits Pods with the policy of `settings` (its informers follow within moments)."""
    wanted = transformed(settings, _probe_pod("probe"))["spec"]["containers"][0]["env"]
    seen: list[Any] = [None]

    def in_force() -> bool:
        seen[0] = _admitted_env(cluster)
        return bool(seen[0] == wanted)

    try:
        _wait(in_force, "the admission policy in force", timeout=90)
    except AssertionError:
        why = f" (refused: {REFUSED[-1][:600]})" if seen[0] is None and REFUSED else ""
        raise AssertionError(f"the admission policy not in force: {_first_difference(seen[0], wanted)}{why}") from None


def _raw_for(name: str, kubernetes_version: str | None) -> dict[str, Any]:
    """The profile's settings as written for a cluster of `kubernetes_version` (None: left unset)."""
    raw = profile_raw(name)
    if kubernetes_version is not None:
        raw["cluster"] = {**raw["cluster"], "kubernetesVersion": kubernetes_version}
    return raw


def _apply_profile(cluster: Cluster, name: str, kubernetes_version: str | None = None) -> Settings:
    """The profile's policy as rendered for `kubernetes_version` (None: this cluster's own, `settings_version`)
    applied, once in force; the same settings are the transform's, the expected side."""
    version = cluster.settings_version if kubernetes_version is None else kubernetes_version
    raw = _raw_for(name, version)
    settings = parse_settings(raw)
    cluster.kubectl("apply", "-f", "-", stdin=cluster.render_admission(raw, f"{name}-{version}"))
    _in_force(cluster, settings)
    return settings


def _first_difference(got: Any, wanted: Any, where: str = "") -> str:
    """Where two parts first differ, and how: the assertion's message."""
    if isinstance(got, dict) and isinstance(wanted, dict):
        for key in sorted({*got, *wanted}):
            if got.get(key) != wanted.get(key):
                return _first_difference(got.get(key), wanted.get(key), f"{where}.{key}")
    if isinstance(got, list) and isinstance(wanted, list):
        for i, (a, b) in enumerate(zip(got, wanted, strict=False)):
            if a != b:
                return _first_difference(a, b, f"{where}[{i}]")
        return f"{where}: {len(got)} items, expected {len(wanted)}: {got[len(wanted) :] or wanted[len(got) :]}"
    return f"{where}: {got!r}, expected {wanted!r}"


def _delete_pods(cluster: Cluster) -> None:
    for namespace in namespaces():
        cluster.kubectl("delete", "pods,deployments,jobs", "-n", namespace, "-l", "table=injection", "--wait=false")


def _every_case(cluster: Cluster, profile: str, version: str | None) -> None:
    """Every case of the table created as a Pod under the profile's policy as rendered for `version` (None: the
    cluster's own): each comes out as the transform of the same settings renders it."""
    settings = _apply_profile(cluster, profile, version)
    version = version or cluster.settings_version
    rendered = cluster.render_admission(_raw_for(profile, version), "rendered")
    expected_api = admission_api_version(settings)
    assert [d["apiVersion"] for d in yaml.safe_load_all(rendered)] == [expected_api, expected_api]
    served = cluster.get(f"mutatingadmissionpolicies.{expected_api.split('/')[1]}.admissionregistration.k8s.io",
                         POLICY_NAME)  # fmt: skip
    assert served["apiVersion"] == expected_api
    compared = untouched = stamped = 0
    for case in cases():
        pod = case.pod(f"{profile}-{(version or 'v1').replace('.', '')}-{case.name}")
        pod["metadata"]["labels"] = {"table": "injection"}
        admitted = cluster.pods.create(pod)
        expected = transformed(settings, pod)
        got, wanted = injected_parts(admitted["spec"]), injected_parts(expected["spec"])
        assert got == wanted, (profile, case.name, _first_difference(got, wanted))
        # The values digest: on each Pod that got anything, unless it had its own (kept); on no other.
        assert stamp(admitted) == stamp(expected), (profile, case.name)
        stamped += stamp(admitted) == settings_digest(settings)
        compared += 1
        untouched += expected == pod
    _delete_pods(cluster)
    assert compared == len(cases())
    # The table holds Pods left alone (opted out, excluded namespaces, kube-system; with credentials, namespaces
    # without the proxy-config Secret) and Pods changed: both sides of each rule were exercised.
    assert 3 <= untouched < compared, untouched
    assert stamped >= 10, stamped


@pytest.mark.cluster
@pytest.mark.parametrize("profile", profiles())
def test_every_case_of_the_table_comes_out_of_admission_as_the_transform_renders_it(
    cluster: Cluster, profile: str
) -> None:
    """Each profile with the policy rendered for this cluster: v1 on the default version (cluster.kubernetesVersion
    unset), v1beta1 on 1.35 (cluster.kubernetesVersion '1.35')."""
    _every_case(cluster, profile, None)


@pytest.mark.cluster
def test_a_policy_rendered_for_the_other_api_version_is_served_on_newer_clusters_and_refused_on_1_35(
    cluster: Cluster,
) -> None:
    """What the other side's rendering does here. On the default version: the trust profile rendered for 1.35
    (v1beta1), which a cluster upgraded since the stack's last update holds, is served and works, case by case. On
    1.35: the rendering for 1.36 and later (v1, what settings without cluster.kubernetesVersion give) is refused by
    the API server, which is why the stack program reads the version from the API server when the settings leave it
    unset."""
    if cluster.minor is None or cluster.minor >= ADMISSION_GA_MINOR:
        _every_case(cluster, "trust", "1.35")
        return
    raw = profile_raw("trust")
    assert admission_api_version(parse_settings(raw)) == "admissionregistration.k8s.io/v1"
    refused = cluster.kubectl("apply", "-f", "-", stdin=cluster.render_admission(raw, "trust-unset"), check=False)
    assert refused.returncode != 0, refused.stdout
    assert 'no matches for kind "MutatingAdmissionPolicy" in version "admissionregistration.k8s.io/v1"' in (
        refused.stderr
    ), refused.stderr
    assert cluster.kubectl("get", "mutatingadmissionpolicies.v1.admissionregistration.k8s.io", check=False).returncode


@pytest.mark.cluster
@pytest.mark.parametrize("profile", profiles())
def test_ephemeral_containers_added_by_the_subresource_get_what_the_transform_gives_them(
    cluster: Cluster, profile: str
) -> None:
    """`kubectl debug`'s way: each ephemeral container of the table added to its running Pod by one UPDATE of
    `pods/ephemeralcontainers`; each comes out as the transform renders it in that Pod (the trust group only where
    the Pod has the `proxy-trust` volume already), and the ones added before stay exactly as they were."""
    settings = _apply_profile(cluster, profile)
    by_name = {case.name: case for case in cases()}
    changed = untouched = 0
    for eph in ephemeral_cases():
        case = by_name[eph.pod]
        pod = case.pod(f"eph-{profile}-{eph.name}")
        pod["metadata"]["labels"] = {"table": "injection"}
        name = pod["metadata"]["name"]
        admitted = cluster.pods.create(pod)
        expected: list[dict[str, Any]] = []
        for container in eph.containers:
            # A JSON patch appends it, keeping the order (a strategic merge patch puts the new one first).
            path = "/spec/ephemeralContainers" + ("/-" if expected else "")
            patch = [{"op": "add", "path": path, "value": container if expected else [container]}]
            patched = cluster.pods.patch_ephemeral_containers(name, case.namespace, patch)
            expected += ephemeral_transformed(settings, admitted, [container])
            got = container_parts(patched["spec"]["ephemeralContainers"])
            assert got == container_parts(expected), (
                profile,
                eph.name,
                _first_difference(got, container_parts(expected)),
            )
            changed += expected[-1] != container
            untouched += expected[-1] == container
        # The Pod's other containers and volumes are as admission made them at CREATE.
        after = cluster.pods.get(name, case.namespace)
        assert injected_parts(after["spec"]) == injected_parts(admitted["spec"])
        assert stamp(after) == stamp(admitted), "an ephemeral container changes no stamp"
    _delete_pods(cluster)
    # Both sides of the rules exercised: containers given the env (and, with trust, the mount) and containers left
    # alone (their own proxy names, opted-out Pods, excluded namespaces).
    assert changed >= 4, (changed, untouched)
    assert untouched >= 2, (changed, untouched)


def _workload(case: Case, kind: str, name: str) -> dict[str, Any]:
    pod = case.pod(name)
    template: dict[str, Any] = {"metadata": {"labels": {"app": name, "table": "injection"}}, "spec": pod["spec"]}
    if case.annotations:
        template["metadata"]["annotations"] = dict(case.annotations)
    metadata = {"name": name, "namespace": case.namespace, "labels": {"table": "injection"}}
    if kind == "Deployment":
        spec: dict[str, Any] = {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": template}
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata, "spec": spec}
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": kind, "metadata": metadata, "spec": {"template": template}}


def _template_by_transform(settings: Settings, workload: dict[str, Any]) -> dict[str, Any]:
    """The workload's pod spec as the stack transform renders the workload (not a Pod): what the controller's Pods
    must carry."""
    group_version = workload["apiVersion"]
    transform = proxy_env_transform(settings, plain_values(settings))
    args = pulumi.ResourceTransformArgs(
        custom=True, type_=f"kubernetes:{group_version}:{workload['kind']}", name="x",
        props=copy.deepcopy(workload), opts=pulumi.ResourceOptions(),
    )  # fmt: skip
    result = transform(args)
    props: dict[str, Any] = workload if result is None else dict(result.props)
    spec: dict[str, Any] = props["spec"]["template"]["spec"]
    return spec


@pytest.mark.cluster
def test_pods_of_a_deployment_and_a_job_made_by_the_real_controllers_get_what_the_transform_gives(
    cluster: Cluster,
) -> None:
    settings = _apply_profile(cluster, "trust")
    by_name = {case.name: case for case in cases()}
    runs = [
        ("Deployment", by_name["each-container-its-own"], "web"),
        ("Deployment", by_name["runtimes-node-python"], "py-web"),
        ("Job", by_name["init-containers"], "setup-job"),
        ("Job", by_name["trust-opt-outs"], "trust-job"),
    ]
    for kind, case, name in runs:
        workload = _workload(case, kind, name)
        cluster.apply([workload])
        expected = injected_parts(_template_by_transform(settings, workload))
        count = 2 if kind == "Deployment" else 1

        def made(namespace: str = case.namespace, app: str = name, n: int = count) -> bool:
            return len(cluster.get("pods", "-n", namespace, "-l", f"app={app}")["items"]) == n

        _wait(made, f"the {kind} controller's Pods of {name}")
        pods = cluster.get("pods", "-n", case.namespace, "-l", f"app={name}")["items"]
        for pod in pods:
            owner = pod["metadata"]["ownerReferences"][0]["kind"]
            assert owner == ("ReplicaSet" if kind == "Deployment" else "Job"), owner
            assert injected_parts(pod["spec"]) == expected, (kind, name, pod["metadata"]["name"])
            assert stamp(pod) == settings_digest(settings), (kind, name, pod["metadata"]["name"])
        # The workload itself stays as written: admission mutates Pods, never their templates.
        stored = cluster.get(kind.lower(), name, "-n", case.namespace)["spec"]["template"]["spec"]
        assert injected_parts(stored) == injected_parts(workload["spec"]["template"]["spec"])
    _delete_pods(cluster)


@pytest.mark.cluster
def test_the_whole_rendering_for_the_api_servers_own_version_is_accepted_by_it(cluster: Cluster) -> None:
    """`cluster.kubernetesVersion` set to the API server's own `major.minor`, as the stack program sets it when the
    settings leave it unset: every object `render` gives (the proxy's DaemonSet and Service, proxy-config,
    proxy-trust, the admission policy and binding) passes a server-side dry run with kubectl's strict field
    validation, and the server keeps the Service's `trafficDistribution: PreferSameNode` (rendered from 1.35 on)."""
    served = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    version = f"{served['major']}.{served['minor'].rstrip('+')}"
    assert cluster.settings_version in (None, version), (cluster.settings_version, version)
    raw = _raw_for("trust", version)
    raw["injection"] = {**raw.get("injection", {}), "admission": True}
    path = cluster.workdir / f"whole-{version}.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = subprocess.run([sys.executable, "-m", "proxy_component.cli", "render", str(path)], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = {d["kind"] for d in rendered}
    assert {"DaemonSet", "Service", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} <= kinds, kinds
    # Server-side: the trust bundle is larger than client-side apply's last-applied annotation allows; forcing the
    # fields the earlier tests' client-side applies own (a dry run: nothing changes).
    out = cluster.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-o", "json", "-f", "-",
                          stdin=result.stdout)  # fmt: skip
    items = json.loads(out.stdout)
    accepted = items.get("items", [items])
    assert len(accepted) == len(rendered), [(d["kind"], d["metadata"]["name"]) for d in accepted]
    service = next(d for d in accepted if d["kind"] == "Service")
    assert service["spec"].get("trafficDistribution") == "PreferSameNode", service["spec"]
    policy = next(d for d in accepted if d["kind"] == "MutatingAdmissionPolicy")
    assert policy["apiVersion"] == admission_api_version(parse_settings(raw)), policy["apiVersion"]


@pytest.mark.cluster
def test_cluster_trust_bundles_are_served_from_1_37_and_projected_by_the_policy(cluster: Cluster) -> None:
    """injection.clusterTrustBundle: on 1.37 the two ClusterTrustBundles of the project's signer are created for real
    (every certificate of the merged one a trust anchor the API server takes), and the admission policy gives a Pod
    the projected `proxy-trust` volume with them, beside the trust variables and mount; on 1.35 (no
    ClusterTrustBundle by default) and 1.36 (beta, off) the settings are refused before anything is rendered, naming the version."""
    raw = _raw_for("trust", cluster.settings_version)
    raw["injection"] = {**raw.get("injection", {}), "admission": True, "clusterTrustBundle": True}
    path = cluster.workdir / "ctb.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = subprocess.run([sys.executable, "-m", "proxy_component.cli", "render", str(path)], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)  # fmt: skip
    if cluster.minor is not None and cluster.minor < CLUSTER_TRUST_BUNDLE_MINOR:  # 1.36, 1.35
        assert result.returncode != 0, result.stdout[:300]
        wanted = f"injection.clusterTrustBundle: cluster.kubernetesVersion '{cluster.settings_version}'"
        assert wanted in result.stderr, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        assert cluster.kubectl("api-resources", "--api-group=certificates.k8s.io", "-o", "name").stdout.split() == [
            "certificatesigningrequests.certificates.k8s.io"
        ]
        return
    assert result.returncode == 0, result.stderr
    rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
    bundles = [d for d in rendered if d["kind"] == "ClusterTrustBundle"]
    assert [b["metadata"]["name"] for b in bundles] == [
        "proxy-component.io:trust:corporate",
        "proxy-component.io:trust:merged",
    ]
    admission = [d for d in rendered if d["kind"].startswith("MutatingAdmissionPolicy")]
    try:
        cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(bundles))
        stored = cluster.get("clustertrustbundles", "-l", "app.kubernetes.io/part-of=proxy-component")["items"]
        assert {b["metadata"]["name"]: b["spec"]["trustBundle"] for b in stored} == {
            b["metadata"]["name"]: b["spec"]["trustBundle"] for b in bundles
        }
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(admission))

        def projected() -> bool:
            out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                  stdin=json.dumps(_probe_pod("probe")), check=False)  # fmt: skip
            if out.returncode != 0:
                REFUSED[:] = [out.stderr.strip()]
                return False
            volumes = json.loads(out.stdout)["spec"].get("volumes") or []
            return any("projected" in v for v in volumes if v["name"] == "proxy-trust")

        _wait(projected, f"the policy projecting the ClusterTrustBundles ({REFUSED[-1:]})", timeout=90)
        pod = json.loads(cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                         stdin=json.dumps(_probe_pod("probe"))).stdout)  # fmt: skip
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "proxy-trust"]
        sources = volume["projected"]["sources"]
        assert [s["clusterTrustBundle"]["path"] for s in sources[:2]] == ["corporate-ca.crt", "ca-bundle.crt"]
        assert {s["clusterTrustBundle"]["signerName"] for s in sources[:2]} == {"proxy-component.io/trust"}
        assert sources[2]["configMap"]["name"] == "proxy-trust"
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SSL_CERT_FILE"] == "/etc/proxy-component/trust/ca-bundle.crt", env
        assert {"name": "proxy-trust", "mountPath": "/etc/proxy-component/trust", "readOnly": True} in container[
            "volumeMounts"
        ]
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all([*admission, *bundles]))


PROBE_POLICY = "pc-paramkind-probe"


def _paramkind_probe(cluster: Cluster) -> str | None:
    """The annotation a ConfigMap-parameter policy gives a Pod in `other` now (None: refused, the reason kept)."""
    pod = _probe_pod("paramkind")
    pod["metadata"]["namespace"] = "other"
    out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod), check=False)
    if out.returncode != 0:
        REFUSED[:] = [out.stderr.strip()]
        return None
    annotations: dict[str, str] = json.loads(out.stdout)["metadata"].get("annotations") or {}
    return annotations.get("pc-param", "unbound")


@pytest.mark.cluster
def test_the_api_servers_paramkind_defect_the_policy_is_built_without_is_real_and_leaves_it_working(
    cluster: Cluster,
) -> None:
    """Why the values are literals and not a `paramKind` ConfigMap (render/admission.py): on kube-apiserver 1.36.3, a
    policy with a ConfigMap parameter follows the ConfigMap's changes while bound; once its binding is deleted for a
    moment and created again, the API server no longer sees the ConfigMap's changes (its informer was stopped for
    good: kubernetes/kubernetes#130887): Pods get the stale value or are refused. Our policy, with no parameter,
    still gives every Pod what the transform gives it. Last in this module: the defect lasts as long as the API
    server's process."""
    settings = _apply_profile(cluster, "runtimes")
    api = admission_api_version(settings)  # v1beta1 on 1.35
    select = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}}
    policy = {
        "apiVersion": api, "kind": "MutatingAdmissionPolicy", "metadata": {"name": PROBE_POLICY},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [POD_CREATE]},
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{metadata: Object.metadata{annotations: {'pc-param': params.data.value}}}"}}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": api, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": PROBE_POLICY},
        "spec": {"policyName": PROBE_POLICY, "matchResources": select,
                 "paramRef": {"name": PROBE_POLICY, "namespace": "other", "parameterNotFoundAction": "Deny"}},
    }  # fmt: skip

    def param(value: str) -> None:
        cluster.apply([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": PROBE_POLICY, "namespace": "other"},
                        "data": {"value": value}}])  # fmt: skip

    try:
        param("v1")
        cluster.apply([policy, binding])
        _wait(lambda: _paramkind_probe(cluster) == "v1", "the parameter policy in force", timeout=60)
        param("v2")  # while bound, a change of the ConfigMap reaches admission
        _wait(lambda: _paramkind_probe(cluster) == "v2", "the parameter's change seen", timeout=30)
        cluster.kubectl("delete", "mutatingadmissionpolicybinding", PROBE_POLICY)
        time.sleep(5)  # more than the policy source's one-second refresh: no binding names a ConfigMap parameter
        cluster.apply([binding])
        param("v3")
        seen: set[str | None] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen.add(_paramkind_probe(cluster))
            time.sleep(1)
        assert "v3" not in seen, f"the API server saw the parameter again: {seen} (has #130887 been fixed?)"
        assert seen & {"v2", None}, (seen, REFUSED)  # the stale value, or refused; "unbound" at most while re-binding
        print(f"paramKind defect reproduced: admission saw {seen} for 30 s after the parameter became v3; "
              f"refused with: {REFUSED[-1][:300] if None in seen else '-'}", file=sys.stderr)  # fmt: skip
    finally:
        for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
            cluster.kubectl("delete", kind, PROBE_POLICY, "--ignore-not-found")
    # The product's policy holds its values itself: every case of the table still comes out as the transform's.
    for case in cases():
        pod = case.pod(f"after-defect-{case.name}")
        pod["metadata"]["labels"] = {"table": "injection"}
        admitted = json.loads(cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                              stdin=json.dumps(pod)).stdout)  # fmt: skip
        assert injected_parts(admitted["spec"]) == injected_parts(transformed(settings, pod)["spec"]), case.name
        assert stamp(admitted) == stamp(transformed(settings, pod)), case.name
