"""The Helm lane's machinery: the real charts (../shared/charts), `helm template` of each profile's values through
them, and what each rendered container gets.

The charts are the upstream sources listed in ../shared/charts/README.md (PROXY_COMPONENT_CHARTS overrides the
directory); Helm is scripts/helm's builds of helm.sh/helm/v3 and helm.sh/helm/v4: the lane runs under both (users
have either). Nothing here is mocked: a chart that refuses the values, or a missing Helm, is a failure with Helm's
(or scripts/helm's) own message.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from proxy_component.render.env import VALUES_ANNOTATION, env_pairs
from proxy_component.render.helm import PROFILES, LeftOut, helm_values, merge_values, profile_no_proxy, profile_values
from proxy_component.settings import Settings
from tests.examples import example

ROOT = Path(__file__).resolve().parents[2]
CHARTS = Path(os.environ.get("PROXY_COMPONENT_CHARTS", ROOT.parent / "shared" / "charts"))
KUBE_VERSION = "1.33.0"
NAMESPACE = "tools"
EXAMPLES = ("ipv6-only", "corporate-proxy")
PROXY_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod")


@dataclass(frozen=True)
class Chart:
    """One archive of ../shared/charts: the values it needs to render at all (not proxy values)."""

    archive: str
    needs: Mapping[str, Any] = field(default_factory=dict)


CHART_ARCHIVES: Mapping[str, Chart] = {
    chart.archive: chart
    for chart in (
        Chart("argo-cd"),
        Chart("cert-manager"),
        # The chart's schema requires these four (../shared/charts/README.md).
        Chart(
            "cloudzero-agent",
            {"apiKey": "not-a-key", "clusterName": "lane", "cloudAccountId": "123456789012", "region": "us-east-1"},
        ),
        Chart("external-secrets"),
        Chart("giantswarm-cert-manager-app"),
        # Its kubectl-apply-job dependency was removed from the archive (it installs the CRDs).
        Chart("giantswarm-external-dns-app", {"crd": {"install": False}}),
        Chart("kyverno"),
        Chart("vsphere-cpi"),
    )
}

# Each Helm-chart profile and the charts that read its values (Giant Swarm's cluster values: every app of the
# cluster, here its cert-manager-app and external-dns-app).
PROVEN: Mapping[str, tuple[str, ...]] = {
    "argo-cd": ("argo-cd",),
    "cert-manager": ("cert-manager",),
    "cloudzero-agent": ("cloudzero-agent",),
    "env": ("giantswarm-external-dns-app",),
    "external-secrets": ("external-secrets",),
    "giantswarm-cluster-values": ("giantswarm-cert-manager-app", "giantswarm-external-dns-app"),
    "kyverno": ("kyverno",),
}
# The profiles `helm template` cannot prove, and why.
NOT_PROVEN: Mapping[str, str] = {
    "proxy": "generic: no chart is known, check the chart's own proxy block first",
    "tkg-kapp-controller": "TKG addon data values, rendered by ytt (its Go modules are not served here), not Helm",
    "tkg-vsphere-cpi": "TKG addon data values, rendered by ytt (its Go modules are not served here), not Helm",
    "tkg-vsphere-csi": "TKG addon data values, rendered by ytt (its Go modules are not served here), not Helm",
}
# Release names argo-cd is also rendered under: its in-cluster names derive from the release name.
ARGO_CD_RELEASES = ("my-release",)


class HelmBuildError(RuntimeError):
    """scripts/helm failed; the message is its own (module, version, go's reason)."""


# The Helm majors the lane renders with (scripts/helm 3, scripts/helm 4).
HELM_MAJORS = ("3", "4")


def build_helm(major: str = "3") -> Path:
    """scripts/helm MAJOR: the helm binary of that major version (a warm cache builds nothing)."""
    result = subprocess.run(["bash", str(ROOT / "scripts/helm"), major], capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise HelmBuildError(f"scripts/helm {major} failed:\n{result.stderr}")
    return Path(result.stdout.strip().splitlines()[-1])


def extract_charts(dest: Path) -> dict[str, Path]:
    """Every archive the lane uses, unpacked under `dest`: archive name -> the chart's directory."""
    found: dict[str, Path] = {}
    for name in CHART_ARCHIVES:
        archive = CHARTS / f"{name}.tar.gz"
        assert archive.is_file(), f"{archive}: missing (set PROXY_COMPONENT_CHARTS to the charts' directory)"
        with tarfile.open(archive) as tar:
            tar.extractall(dest / name, filter="data")
        charts = sorted(p.parent for p in (dest / name).glob("*/Chart.yaml"))
        assert len(charts) == 1, f"{archive}: expected one chart at its top level, found {charts}"
        found[name] = charts[0]
    return found


@dataclass(frozen=True)
class Case:
    """One profile's values for one example cluster and release, through one chart."""

    profile: str
    example: str
    chart: str
    release: str

    @property
    def id(self) -> str:
        return f"{self.profile}-{self.example}-{self.chart}-{self.release}"


def release_of(profile: str, chart: str) -> str:
    """The release the chart's docs use where names derive from it (argo-cd: argocd), else the chart's name."""
    return PROFILES[profile].release or chart


def cases() -> list[Case]:
    found = [
        Case(profile, name, chart, release_of(profile, chart))
        for profile, charts in PROVEN.items()
        for chart in charts
        for name in EXAMPLES
    ]
    found += [Case("argo-cd", name, "argo-cd", release) for release in ARGO_CD_RELEASES for name in EXAMPLES]
    return found


def settings_of(name: str) -> Settings:
    settings, network = example(name)
    assert network is None, name
    return settings


def release_arg(case: Case) -> str | None:
    """What `--release` the user gives for this case: none for the docs' release (the default derives it)."""
    return None if case.release == release_of(case.profile, case.chart) else case.release


def values_of(case: Case) -> dict[str, Any]:
    """The profile's values (as `render --format helm-values PROFILE [--release NAME]` writes them), merged into
    the values the chart needs to render at all."""
    settings = settings_of(case.example)
    proxy = helm_values(case.profile, profile_values(settings, case.profile, release=release_arg(case)))
    return merge_values(dict(CHART_ARCHIVES[case.chart].needs), proxy)


@dataclass(frozen=True)
class Rendered:
    returncode: int
    stderr: str
    objects: tuple[dict[str, Any], ...]


def helm_template(helm: Path, chart_dir: Path, release: str, values: Mapping[str, Any]) -> Rendered:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(dict(values), file)
        file.flush()
        result = subprocess.run(
            [str(helm), "template", release, str(chart_dir), "--namespace", NAMESPACE,
             "--kube-version", KUBE_VERSION, "-f", file.name],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    objects = tuple(d for d in yaml.safe_load_all(result.stdout) if d) if result.returncode == 0 else ()
    return Rendered(result.returncode, result.stderr, objects)


@dataclass(frozen=True)
class Container:
    workload: str  # Kind/name
    name: str
    init: bool
    env: Mapping[str, str | None]  # the proxy variables it gets, resolved; None: a reference nothing rendered holds
    stamp: str | None = None  # its pod template's values digest annotation

    @property
    def path(self) -> str:
        return f"{self.workload.split('/', 1)[1]}/{self.name}"

    @property
    def has_proxy(self) -> bool:
        return all(self.env.get(name) for name in PROXY_NAMES)


def _data(obj: Mapping[str, Any]) -> dict[str, str]:
    data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
    if obj.get("kind") == "Secret":
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
    return data


def pod_specs(obj: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    kind = obj.get("kind")
    if kind not in WORKLOADS:
        return
    spec = obj["spec"]
    if kind == "Pod":
        yield spec
    elif kind == "CronJob":
        yield spec["jobTemplate"]["spec"]["template"]["spec"]
    else:
        yield spec["template"]["spec"]


def pod_metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The metadata of a workload's pod template (a Pod's own)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return obj.get("metadata") or {}
    if kind == "CronJob":
        return spec["jobTemplate"]["spec"]["template"].get("metadata") or {}
    return spec["template"].get("metadata") or {}


def containers(objects: tuple[dict[str, Any], ...]) -> list[Container]:
    """Every container and initContainer of every workload (hooks, Jobs, CronJobs and test Pods included), with
    the proxy variables it gets from `env` (literals, or ConfigMap/Secret keys the chart renders) and `envFrom`."""
    sources = {
        (o["kind"], o["metadata"]["name"]): _data(o) for o in objects if o.get("kind") in ("ConfigMap", "Secret")
    }
    found: list[Container] = []
    for obj in objects:
        for spec in pod_specs(obj):
            workload = f"{obj['kind']}/{obj['metadata']['name']}"
            stamp = (pod_metadata(obj).get("annotations") or {}).get(VALUES_ANNOTATION)
            for key in ("initContainers", "containers"):
                for c in spec.get(key) or []:
                    env: dict[str, str | None] = {}
                    for source in c.get("envFrom") or []:
                        for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                            if ref in source:
                                prefix = source.get("prefix", "")
                                data = sources.get((kind, source[ref]["name"]), {})
                                env.update({prefix + k: v for k, v in data.items()})
                    for entry in c.get("env") or []:
                        env[entry["name"]] = _env_value(entry, sources)
                    wanted = {n: v for n, v in env.items() if n.upper() in PROXY_NAMES}
                    found.append(Container(workload, c["name"], key == "initContainers", wanted, stamp))
    return found


def _env_value(entry: Mapping[str, Any], sources: Mapping[tuple[str, str], Mapping[str, str]]) -> str | None:
    if "value" in entry:
        return str(entry["value"])
    ref = entry.get("valueFrom") or {}
    for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
        if key in ref:
            return sources.get((kind, ref[key]["name"]), {}).get(ref[key]["key"])
    return None


def left_out_by(profile: str, container: Container) -> LeftOut | None:
    return next((lo for lo in PROFILES[profile].left_out if fnmatch.fnmatchcase(container.path, lo.pattern)), None)


# A name ending in .svc or .svc.cluster.local, not followed by more labels (those end in the cluster's domain).
_SVC_NAME = re.compile(
    r"(?<![A-Za-z0-9.-])((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+svc(?:\.cluster\.local)?)(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
)


def wired_names(objects: tuple[dict[str, Any], ...]) -> set[str]:
    """The in-cluster names the chart wires its components to: every `….svc` and `….svc.cluster.local` name in
    its workloads, ConfigMaps and Secrets, and the host of every `*.server` key of Argo CD's argocd-cmd-params-cm
    (repo.server, redis.server, server.dex.server, commit.server)."""
    names: set[str] = set()
    for obj in objects:
        if obj.get("kind") in (*WORKLOADS, "ConfigMap", "Secret"):
            text = yaml.safe_dump(obj) + "\n".join(_data(obj).values())
            names |= set(_SVC_NAME.findall(text))
        if obj.get("kind") == "ConfigMap" and obj["metadata"]["name"].endswith("argocd-cmd-params-cm"):
            for key, value in (obj.get("data") or {}).items():
                if key.endswith(".server") and value:
                    host = str(value).split("://", 1)[-1].rsplit(":", 1)[0]
                    names.add(host)
    return names


def covered(name: str, no_proxy: str) -> bool:
    """Whether a NO_PROXY token covers the name as Go and curl match names: the name itself or a parent domain."""
    for token in no_proxy.split(","):
        suffix = token.lstrip("*").lstrip(".")
        if suffix and (name == suffix or name.endswith(f".{suffix}")):
            return True
    return False


def chart_version(chart_dir: Path) -> str:
    meta = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    return f"{meta['name']} {meta['version']}"


@dataclass
class Result:
    """What one case shows: the row of the lane's table and the problems the assertions name."""

    case: Case
    chart: str
    accepted: bool
    error: str
    workloads: int
    containers: list[Container]
    expected_no_proxy: str
    problems: list[str]
    left_out: list[tuple[str, str]]
    no_proxy_exact: bool


def check(case: Case, helm: Path, charts: Mapping[str, Path]) -> Result:
    """Render the case and hold every container to the profile: the three variables with the exact values, unless
    the profile leaves it out on purpose; and every name the chart wires covered by the profile's NO_PROXY."""
    settings = settings_of(case.example)
    rendered = helm_template(helm, charts[case.chart], case.release, values_of(case))
    values = profile_values(settings, case.profile, release=release_arg(case))
    expected = str(profile_no_proxy(settings, case.profile, release=release_arg(case)))
    problems: list[str] = []
    if rendered.returncode != 0:
        problems.append(f"helm template refused the values: {rendered.stderr.strip()}")
    found = containers(rendered.objects)
    left: list[tuple[str, str]] = []
    exact = True
    for c in found:
        reason = left_out_by(case.profile, c)
        if not c.has_proxy:
            if reason is None:
                problems.append(f"{c.path}: has {sorted(c.env)} of {list(PROXY_NAMES)} and is not on the left-out list")
            else:
                left.append((c.path, reason.reason))
            continue
        if reason is not None:
            problems.append(f"{c.path}: gets the proxy but is on the left-out list as {reason.pattern!r}")
        # The values digest on each pod the env reaches, where the chart takes pod annotations (annotation_keys).
        stamp = values.digest if PROFILES[case.profile].annotation_keys else None
        if c.stamp != stamp:
            problems.append(f"{c.path}: its pod's {VALUES_ANNOTATION} is {c.stamp!r}, expected {stamp!r}")
        # NO_PROXY is the composed value; the other names are what the profile's env list gives them (lower-case
        # no_proxy is the Python-safe rendering when the cluster selects it).
        want = {**dict(env_pairs(values)), "NO_PROXY": expected}
        for name, value in c.env.items():
            if value != want[name]:
                exact = exact and name != "NO_PROXY"
                problems.append(f"{c.path}: {name}={value!r}, expected {want[name]!r}")
    if not any(c.has_proxy for c in found):
        problems.append("no container gets the proxy")
    for name in sorted(wired_names(rendered.objects)):
        if not covered(name, expected):
            problems.append(f"the chart wires {name}, which the profile's NO_PROXY does not cover")
    workloads = len({c.workload for c in found})
    return Result(
        case, chart_version(charts[case.chart]), rendered.returncode == 0, rendered.stderr.strip(), workloads,
        found, expected, problems, left, exact and rendered.returncode == 0,
    )  # fmt: skip


class Lane:
    """The lane's renders, each done once: shared by the tests and the table."""

    def __init__(self, helm: Path, charts: Mapping[str, Path]) -> None:
        self.helm = helm
        self.charts = charts

    @functools.cache  # noqa: B019 - one Lane per session
    def result(self, case: Case) -> Result:
        return check(case, self.helm, self.charts)

    def render(self, chart: str, release: str, values: Mapping[str, Any]) -> Rendered:
        return helm_template(self.helm, self.charts[chart], release, values)


def table(lane: Lane) -> str:
    """The lane's table (Markdown): per profile, example and release, what the chart did with the values."""
    lines = [
        "| profile | example | release | chart | accepted | workloads | containers with the proxy | left out, why "
        "| NO_PROXY exact |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in sorted(cases(), key=lambda c: (c.profile, c.chart, c.release != release_of(c.profile, c.chart),
                                                c.release, c.example)):  # fmt: skip
        r = lane.result(case)
        with_env = sum(c.has_proxy for c in r.containers)
        reasons: dict[str, list[str]] = {}
        for path, why in r.left_out:
            reasons.setdefault(why, []).append(f"`{path}`")
        left = "<br>".join(f"{', '.join(paths)}: {why}" for why, paths in reasons.items()) or "none"
        lines.append(
            f"| `{case.profile}` | {case.example} | `{case.release}` | {r.chart} | {'yes' if r.accepted else 'NO'} "
            f"| {r.workloads} | {with_env}/{len(r.containers)} | {left} | {'yes' if r.no_proxy_exact else 'NO'} |"
        )
    return "\n".join(lines) + "\n"
