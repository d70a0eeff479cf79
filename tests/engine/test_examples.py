"""The examples and the stack transform under the real engine (pytest -m engine).

Every example that needs no cloud account runs `pulumi preview`; a program with the stack transform and a real
`kubernetes:helm.sh/v4:Chart` (tests/fixtures/charts/egress-demo) runs `pulumi up` into a rendered directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Project, read_rendered

pytestmark = pytest.mark.engine
# A kubeconfig whose API server is a closed port on loopback: the provider previews offline, sends nothing out.
UNREACHABLE = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""
CLOUD = {"examples/aks", "examples/eks", "examples/gke", "examples/stack-per-cluster"}
EXAMPLES = sorted(  # the Python examples; examples/yaml and examples/typescript run in test_languages.py
    str(p.parent.relative_to(ROOT))
    for p in ROOT.glob("examples/*/Pulumi.yaml")
    if str(p.parent.relative_to(ROOT)) not in CLOUD and (p.parent / "__main__.py").exists()
)


def test_the_cloud_free_examples_are_the_ones_expected() -> None:
    assert EXAMPLES == ["examples/existing-program", "examples/ipv6-only"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_example_previews_under_the_engine(project_factory: Any, example: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE)
    project: Project = project_factory(example, "ci")
    project.env["KUBECONFIG"] = str(kubeconfig)
    project.init()
    if example == "examples/existing-program":
        project.config("kubeconfig", UNREACHABLE, secret=True)
    preview = project.run("preview", "--json")
    assert "Traceback" not in preview.stderr
    steps = json.loads(preview.stdout)["steps"]
    assert {step["op"] for step in steps} == {"create"}, steps
    created = [step["urn"].split("::")[-2].split("$")[-1] for step in steps]
    assert {"kubernetes:apps/v1:DaemonSet", "kubernetes:core/v1:Service"} <= set(created), created


def test_the_stack_transform_injects_into_a_real_helm_v4_chart(project_factory: Any) -> None:
    project: Project = project_factory("tests/fixtures/programs/helm-transform", "ci")
    project.init()
    project.config("chart", str(ROOT / "tests/fixtures/charts/egress-demo"))
    project.up()
    objects = read_rendered(project.dir / "rendered")
    env = {e["name"]: e["value"] for e in project.outputs()["env"]}
    assert {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} <= env.keys()

    def container_env(kind: str, name: str, field: str = "containers") -> list[dict[str, Any]]:
        obj = objects[(kind, "apps", name)]
        return list(obj["spec"]["template"]["spec"][field][0].get("env", []))

    app = container_env("Deployment", "demo-app")
    assert app[0] == {"name": "LOG_LEVEL", "value": "info"}, "the chart's own env stays first"
    assert {e["name"]: e["value"] for e in app[1:]} == env
    assert {e["name"]: e["value"] for e in container_env("Deployment", "demo-app", "initContainers")} == env
    assert {e["name"]: e["value"] for e in container_env("Job", "demo-migrate")} == env
    assert container_env("Deployment", "demo-opted-out") == [], "an opted-out workload stays clean"
    assert "env" not in str(objects[("ConfigMap", "apps", "demo-settings")])
