"""ClusterProxy from other Pulumi languages under the real engine (pytest -m engine): the plugin in provider/ served
by the Python host, its schema against the checked-in snapshot, and a YAML program that runs `pulumi package add`
and `pulumi up` into a rendered directory, compared object for object with `proxy-component render`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT, Project, as_written, build_engine, read_rendered

pytestmark = pytest.mark.engine
PASSWORD = "yaml-s3cret-77"


@pytest.fixture(scope="session")
def hosts() -> Path:
    """The bin directory with the YAML, Node.js and Go hosts too."""
    return build_engine("cli", "python", "kubernetes", "yaml", "nodejs", "go")


@pytest.fixture
def plugin(engine_venv: Path, tmp_path: Path) -> Path:
    """provider/ in a scratch directory, its venv the engine lane's (this checkout, the pinned SDKs): its
    requirements.txt (`-e ..`, this checkout) is what that venv already holds."""
    dest = tmp_path / "plugin"
    shutil.copytree(
        ROOT / "provider", dest, ignore=shutil.ignore_patterns("venv", "__pycache__", "requirements.txt", "schema.json")
    )
    spec = yaml.safe_load((dest / "PulumiPlugin.yaml").read_text())
    spec["runtime"]["options"]["virtualenv"] = str(engine_venv)
    (dest / "PulumiPlugin.yaml").write_text(yaml.safe_dump(spec))
    return dest


def _home(project: Project, engine: Path) -> None:
    """Plugins a package's dependencies name are looked up in the plugin cache: put the built provider there."""
    project.run(
        "plugin", "install", "resource", "kubernetes", "4.32.0", "--file", str(engine / "pulumi-resource-kubernetes")
    )


def yaml_project(project_factory: Any, hosts: Path, plugin: Path, name: str = "yaml") -> Project:
    project: Project = project_factory("examples/yaml", "ci", name)
    project.env["PATH"] = f"{hosts}:{project.env['PATH']}"
    _home(project, hosts)
    added = project.run("package", "add", str(plugin))
    assert "Added package proxy-component" in added.stdout + added.stderr
    assert yaml.safe_load((project.dir / "Pulumi.yaml").read_text())["packages"] == {"proxy-component": str(plugin)}
    project.init()
    return project


def _render(settings: dict[str, Any], tmp_path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    path = tmp_path / "render.yaml"
    path.write_text(yaml.safe_dump(settings))
    out = tmp_path / "render-out"
    subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path), "-o", str(out)], check=True, cwd=ROOT
    )
    return {key: as_written(obj) for key, obj in read_rendered(out).items()}


def test_the_schema_is_the_checked_in_snapshot(project_factory: Any, hosts: Path, plugin: Path) -> None:
    project: Project = project_factory("examples/yaml", "ci", "schema")
    _home(project, hosts)
    schema = json.loads(project.run("package", "get-schema", str(plugin)).stdout)
    snapshot = ROOT / "provider/schema.json"
    if os.environ.get("PROXY_COMPONENT_UPDATE_SCHEMA") == "1":  # after a settings change: review the diff, commit
        snapshot.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    assert schema == json.loads(snapshot.read_text())


# The settings of the Python example program examples/ipv6-only, which the YAML and TypeScript examples repeat.
IPV6_ONLY = yaml.safe_load((ROOT / "examples/ipv6-only/proxy.yaml").read_text())


def test_a_yaml_program_writes_the_objects_the_python_example_writes(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    project = yaml_project(project_factory, hosts, plugin)
    up = project.up()
    assert "Traceback" not in up.stdout + up.stderr
    assert read_rendered(project.dir / "rendered") == _render(IPV6_ONLY, tmp_path)
    outputs = project.outputs()
    assert outputs["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"
    assert {e["name"] for e in outputs["env"]} >= {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "no_proxy"}
    project.run("preview", "--expect-no-changes")


def typescript_project(project_factory: Any, hosts: Path, plugin: Path, name: str = "typescript") -> Project:
    """examples/typescript with its npm packages and `pulumi package add` done (the stack not created yet)."""
    project: Project = project_factory("examples/typescript", "ci", name)
    project.env["PATH"] = f"{hosts}:{project.env['PATH']}"
    _home(project, hosts)
    npm = subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=project.dir, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert npm.returncode == 0, npm.stderr
    added = project.run("package", "add", str(plugin))
    assert "Added package proxy-component" in added.stdout + added.stderr
    package = json.loads((project.dir / "package.json").read_text())
    assert package["dependencies"]["@pulumi/proxy-component"] == "file:sdks/proxy-component"
    return project


def test_a_typescript_program_writes_the_objects_the_python_example_writes(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    project = typescript_project(project_factory, hosts, plugin)
    project.init()
    up = project.up()
    assert "Traceback" not in up.stdout + up.stderr
    assert read_rendered(project.dir / "rendered") == _render(IPV6_ONLY, tmp_path)
    assert project.outputs()["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"
    project.run("preview", "--expect-no-changes")


def test_a_go_program_writes_the_objects_the_python_example_writes(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    project: Project = project_factory("examples/go", "ci", "go")
    project.env["PATH"] = f"{hosts}:{project.env['PATH']}"
    _home(project, hosts)
    added = project.run("package", "add", str(plugin), timeout=900)
    assert "Added package proxy-component" in added.stdout + added.stderr
    gomod = (project.dir / "go.mod").read_text()
    assert "replace example.com/pulumi-proxy-component/sdk/go => ./sdks/proxy-component" in gomod
    assert "github.com/pulumi/pulumi/sdk/v3 v3.259.0" in gomod
    project.init()
    up = project.up()
    assert "panic:" not in up.stdout + up.stderr
    assert read_rendered(project.dir / "rendered") == _render(IPV6_ONLY, tmp_path)
    outputs = project.outputs()
    assert outputs["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"
    assert outputs["noProxy"] == next(e["value"] for e in outputs["env"] if e["name"] == "NO_PROXY")
    project.run("preview", "--expect-no-changes")


def test_credentials_from_yaml_stay_secret(project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path) -> None:
    """A corporate proxy URL with credentials, pods using it directly: secret config in, secret outputs out."""
    project = yaml_project(project_factory, hosts, plugin)
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    program["config"] = {"corporateProxy": {"type": "string", "secret": True}}
    settings = program["resources"]["proxy"]["properties"]["settings"]
    settings["proxy"]["httpProxy"] = "${corporateProxy}"
    settings["deployment"] = {"enabled": False}
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
    url = f"http://svc:{PASSWORD}@proxy.corp.example:3128"
    project.run("config", "set", "--secret", "corporateProxy", url)
    up = project.up()
    assert PASSWORD not in up.stdout + up.stderr
    assert PASSWORD not in json.dumps(project.export())
    assert project.outputs()["proxyUrl"] == "[secret]"
    assert project.outputs()["env"] == "[secret]"
    assert project.outputs(show_secrets=True)["proxyUrl"] == url
    for path in (project.dir / "rendered").rglob("*.yaml"):
        if PASSWORD in path.read_text() or "c3ZjOn" in path.read_text():  # base64 of "svc:"
            assert yaml.safe_load(path.read_text())["kind"] == "Secret", path
    kinds = {key[0] for key in read_rendered(project.dir / "rendered")}
    assert kinds == {"Secret"}, "proxy-config is a Secret when the URLs carry credentials"
    settings["proxy"]["httpProxy"] = url
    assert read_rendered(project.dir / "rendered") == _render(settings, tmp_path)


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("cluster", "podCidrs"), ["10.0.0.1/33"], "cluster.podCidrs[0]: '10.0.0.1/33' is not a CIDR"),
        (("cluster", "nodeCidrs"), ["10.0.0.0/8", "0.0.0.0/0"], "cluster.nodeCidrs[1]: "),
        (
            ("deployment", "tolerations"),
            [{"operator": "Equal", "value": "egress"}],
            "deployment.tolerations[0]: operator 'Equal' with no key",
        ),
        (("deployment", "priorityClassName"), "system-critical", "deployment.priorityClassName: 'system-critical'"),
    ],
)
def test_bad_settings_from_yaml_fail_with_the_field_naming_message(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path, where: tuple[str, str], value: Any, message: str
) -> None:
    project = yaml_project(project_factory, hosts, plugin)
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    settings = program["resources"]["proxy"]["properties"]["settings"]
    settings.setdefault(where[0], {})[where[1]] = value
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
    up = project.run("up", "--yes", "--skip-preview", check=False)
    assert up.returncode != 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(settings))
    cli = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    problems = [line.strip() for line in cli.stderr.splitlines()[1:]]
    assert problems
    assert any(message in p for p in problems), problems
    output = up.stdout + up.stderr
    for problem in problems:
        assert problem in output, f"{problem!r} not in:\n{output}"
    assert "Traceback" not in output
    assert 'File "' not in output


SCHEDULING = {
    "imagePullSecrets": ["corp-registry"],
    "nodeSelector": {"node.kubernetes.io/pool": "egress"},
    "tolerateAllTaints": False,
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "egress", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": 30}],
    "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]}
        ]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}}
        ],
    }},
    "priorityClassName": "egress-critical",
}  # fmt: skip


def test_the_scheduling_settings_from_yaml_write_what_render_writes(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    """Pull Secrets, nodeSelector, tolerations, node affinity and the PriorityClass through the schema's types (a
    map, lists of objects, nested objects with Kubernetes' long keys) reach the DaemonSet as `render` writes it."""
    project = yaml_project(project_factory, hosts, plugin)
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    settings = program["resources"]["proxy"]["properties"]["settings"]
    settings["deployment"] = SCHEDULING
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
    up = project.up()
    assert "Traceback" not in up.stdout + up.stderr
    rendered = read_rendered(project.dir / "rendered")
    assert rendered == _render(settings, tmp_path)
    (spec,) = [o["spec"]["template"]["spec"] for k, o in rendered.items() if k[0] == "DaemonSet"]
    assert spec["imagePullSecrets"] == [{"name": "corp-registry"}]
    assert spec["priorityClassName"] == "egress-critical"
    assert len(spec["tolerations"]) == 2


def test_an_unknown_key_from_yaml_is_refused_by_its_type_check(project_factory: Any, hosts: Path, plugin: Path) -> None:
    """pulumi-yaml checks the program against the schema first: the key, the type and the accepted keys, no run."""
    project = yaml_project(project_factory, hosts, plugin)
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    program["resources"]["proxy"]["properties"]["settings"]["cluster"]["podCidr"] = ["10.244.0.0/16"]
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
    up = project.run("up", "--yes", "--skip-preview", check=False)
    assert up.returncode != 0
    output = up.stdout + up.stderr
    assert "Property podCidr does not exist on 'proxy-component:index:ClusterSettings'" in output
    assert "Existing properties are: podCidrs" in output
    assert not (project.dir / "rendered").exists()


def test_an_unknown_key_from_an_untyped_program_fails_with_the_python_message(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    """JavaScript, or a cast in TypeScript, sends keys the schema lacks; the SDK would drop them, the provider
    refuses them with the message Python users get."""
    project = typescript_project(project_factory, hosts, plugin, "typescript-unknown")
    source = (project.dir / "index.ts").read_text()
    typo = source.replace('namespaces: ["default"],', 'namespaces: ["default"], deployment: { replica: 2 },')
    typo = typo.replace("    settings: {", "    settings: <any>{")
    assert typo.count("replica: 2") == 1
    assert "<any>{" in typo
    (project.dir / "index.ts").write_text(typo)
    project.init()
    up = project.run("up", "--yes", "--skip-preview", check=False)
    assert up.returncode != 0
    output = up.stdout + up.stderr
    settings = {**IPV6_ONLY, "deployment": {"replica": 2}}
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(settings))
    cli = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    (problem,) = [line.strip() for line in cli.stderr.splitlines()[1:]]
    assert problem.startswith("deployment.replica: unknown key (accepted: ")
    assert problem in output, output
    assert "Traceback" not in output
    assert not (project.dir / "rendered").exists()
