"""The Helm values profiles through the real charts (`helm template`, Helm from scripts/helm, charts from
../shared/charts): accepted, the proxy in every container but the ones left out on purpose, NO_PROXY exact, and
every in-cluster name the chart wires covered, for the IPv6-only and the corporate examples."""

from __future__ import annotations

import fnmatch
import re

import pytest

from proxy_component.render.helm import PROFILES, helm_values, profile_no_proxy, profile_values
from tests.helm.lane import (
    EXAMPLES,
    NOT_PROVEN,
    PROVEN,
    Case,
    Lane,
    cases,
    containers,
    covered,
    settings_of,
    table,
    values_of,
    wired_names,
)
from tests.helm.table import BEGIN, DOC, END


def test_every_profile_is_proven_by_a_chart_or_says_why_not() -> None:
    assert not set(PROVEN) & set(NOT_PROVEN)
    assert set(PROVEN) | set(NOT_PROVEN) == set(PROFILES)
    assert all(NOT_PROVEN.values())


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.id)
def test_the_chart_accepts_the_values_and_every_container_gets_the_proxy(lane: Lane, case: Case) -> None:
    result = lane.result(case)
    assert result.accepted, result.error
    assert result.problems == []
    assert result.no_proxy_exact
    assert any(c.has_proxy for c in result.containers)


@pytest.mark.parametrize("profile", sorted(PROVEN))
def test_every_left_out_entry_matches_a_rendered_container(lane: Lane, profile: str) -> None:
    paths = {c.path for case in cases() if case.profile == profile for c in lane.result(case).containers}
    for entry in PROFILES[profile].left_out:
        assert entry.reason
        assert any(fnmatch.fnmatchcase(path, entry.pattern) for path in paths), f"{entry.pattern} matches nothing"


def test_argo_cd_under_another_release_needs_the_names_of_that_release(lane: Lane) -> None:
    settings = settings_of("corporate-proxy")
    rendered = lane.render("argo-cd", "my-release", {})
    wired = wired_names(rendered.objects)
    assert {"my-release-argocd-repo-server", "my-release-argocd-redis", "my-release-argocd-dex-server"} <= wired
    default = str(profile_no_proxy(settings, "argo-cd"))
    assert not [name for name in wired if name.startswith("my-release") and covered(name, default)]
    mine = str(profile_no_proxy(settings, "argo-cd", release="my-release"))
    assert all(covered(name, mine) for name in wired)


@pytest.mark.parametrize(
    # 50 characters: <release>-argocd-repo-server cut at 63 ends in "-", which the chart trims; 53: Helm's longest.
    "release",
    ["argocd", "my-release", "argo-cd", "prod-argocd", "redis-ha-argocd", "a" * 50, "r" * 53],
)
def test_argo_cd_names_are_the_charts_for_any_release(lane: Lane, release: str) -> None:
    """The names the chart writes into argocd-cmd-params-cm, with Redis and with Redis HA and the commit server."""
    hosts: set[str] = set()
    for values in ({}, {"redis-ha": {"enabled": True}, "commitServer": {"enabled": True}}):
        rendered = lane.render("argo-cd", release, values)
        assert rendered.returncode == 0, rendered.stderr
        params = next(o for o in rendered.objects if o["metadata"]["name"].endswith("argocd-cmd-params-cm"))
        for key, value in params["data"].items():
            if key.endswith(".server"):
                hosts.add(str(value).split("://", 1)[-1].rsplit(":", 1)[0])
    if len(release) < 20:
        assert len(hosts) == 5  # longer names are cut at 63 characters, and may collide (r * 53: -argocd-re twice)
    assert set(PROFILES["argo-cd"].names(release)) == hosts


def test_cloudzero_names_are_covered_whatever_the_cluster_domain(lane: Lane) -> None:
    for name in EXAMPLES:
        settings = settings_of(name)
        case = Case("cloudzero-agent", name, "cloudzero-agent", "cloudzero-agent")
        rendered = lane.render(case.chart, case.release, values_of(case))
        fixed = {n for n in wired_names(rendered.objects) if n.endswith(".svc.cluster.local")}
        assert {
            "cloudzero-agent-cz-aggregator.tools.svc.cluster.local",
            "kubernetes.default.svc.cluster.local",
        } <= fixed
        cluster_wide = str(settings.no_proxy())
        profile = str(profile_no_proxy(settings, "cloudzero-agent"))
        assert all(covered(n, profile) for n in fixed)
        if settings.cluster.dns_domain == "cluster.local":
            assert profile == cluster_wide
        else:
            assert not any(covered(n, cluster_wide) for n in fixed), name
            assert profile == f"{cluster_wide},svc.cluster.local,.svc.cluster.local"


def test_the_upstream_cert_manager_chart_refuses_the_giant_swarm_cluster_values(lane: Lane) -> None:
    values = helm_values("giantswarm-cluster-values", profile_values(settings_of("corporate-proxy"), "cert-manager"))
    rendered = lane.render("cert-manager", "cert-manager", values)
    assert rendered.returncode != 0
    assert re.search(r"at '': additional properties .*'cluster'.* not allowed", rendered.stderr), rendered.stderr


def test_giant_swarm_external_dns_app_reads_no_cluster_proxy(lane: Lane) -> None:
    values = helm_values("giantswarm-cluster-values", profile_values(settings_of("corporate-proxy"), "env"))
    del values["env"]
    rendered = lane.render("giantswarm-external-dns-app", "external-dns", {**values, "crd": {"install": False}})
    assert rendered.returncode == 0, rendered.stderr
    found = containers(rendered.objects)
    assert len(found) == 1
    assert not any(c.env for c in found)


def test_tkg_vsphere_cpi_values_do_nothing_in_the_upstream_chart(lane: Lane) -> None:
    values = helm_values("tkg-vsphere-cpi", profile_values(settings_of("corporate-proxy"), "tkg-vsphere-cpi"))
    plain = lane.render("vsphere-cpi", "vsphere-cpi", {})
    with_tkg = lane.render("vsphere-cpi", "vsphere-cpi", values)
    assert plain.returncode == 0, plain.stderr
    assert with_tkg.returncode == 0, with_tkg.stderr
    assert with_tkg.objects == plain.objects
    assert [c.env for c in containers(with_tkg.objects)] == [{}]


def test_the_docs_hold_the_lanes_table(lane: Lane) -> None:
    doc = DOC.read_text()
    assert BEGIN in doc
    assert doc.split(BEGIN, 1)[1].split(END, 1)[0] == "\n" + table(lane), (
        "docs/helm-profiles.md: run .venv/bin/python -m tests.helm.table --write"
    )
