"""ClusterProxy from other Pulumi languages under the real engine (pytest -m engine): the plugin in provider/ served
by the Python host, its schema against the checked-in snapshot, and YAML, TypeScript and Go programs that run
`pulumi package add` and `pulumi up` into a rendered directory: the component's objects compared object for object
with `proxy-component render`, the Deployment each example writes by hand (its env from the component's outputs or
methods) field for field with what the Python stack transform makes of it, and the methods' results with the Python
methods' (helm_values_for, kustomization).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from proxy_component._release import engine_pins
from proxy_component.render import plain_values
from proxy_component.render.helm import helm_values, profile_values
from proxy_component.render.kustomize import kustomization
from proxy_component.render.trust import trust_env_vars, trust_volume, trust_volume_mount
from proxy_component.settings import parse_settings
from proxy_component.transform import proxy_env_transform
from tests.pki import make_ca

from .conftest import ROOT, Project, as_written, build_engine, read_rendered

pytestmark = pytest.mark.engine
PASSWORD = "yaml-s3cret-77"


@pytest.fixture(scope="session")
def hosts() -> Path:
    """The bin directory with the YAML, Node.js and Go hosts too."""
    return build_engine("cli", "python", "kubernetes", "yaml", "nodejs", "go")


@pytest.fixture
def plugin(plugin_venv: Path, tmp_path: Path) -> Path:
    """provider/ in a scratch directory, its venv a copy of the engine lane's (this checkout, the pinned SDKs): its
    requirements.txt (`-e ..`, this checkout) is what that venv already holds."""
    dest = tmp_path / "plugin"
    shutil.copytree(
        ROOT / "provider", dest, ignore=shutil.ignore_patterns("venv", "__pycache__", "requirements.txt", "schema.json")
    )
    spec = yaml.safe_load((dest / "PulumiPlugin.yaml").read_text())
    spec["runtime"]["options"]["virtualenv"] = str(plugin_venv)
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
    return {key: as_written(obj) for key, obj in read_rendered(out, by_stack=False).items()}


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
# The same behind a TLS-inspecting corporate proxy: the tests add it to the TypeScript and Go examples.
CA = make_ca()
UPSTREAM = {"url": "http://proxy.corp.example:3128", "trustedCa": CA.cert_pem}
WITH_TRUST = {**IPV6_ONLY, "proxy": {**IPV6_ONLY["proxy"], "upstream": UPSTREAM}}
WEB = ("Deployment", "default", "web")
_TS_CALL = re.compile(
    r'const egress = new proxy\.ClusterProxy\("egress", \{\n    settings: \{.*?\n    \},\n\}, \{ providers: \[cluster\] \}\);',
    re.S,
)
_GO_SETTINGS = {
    "whole": re.compile(r"\t\t\tSettings: &proxycomponent\.SettingsArgs\{.*?\n\t\t\t\},\n", re.S),
    "one object": re.compile(r"\t\t\t\tCluster: &proxycomponent\.ClusterSettingsArgs\{.*?\n\t\t\t\t\},\n", re.S),
}


def _ts_shapes(settings: dict[str, Any]) -> dict[str, str]:
    """The settings as TypeScript passes them when they arrive as Outputs: the whole object, one object inside it,
    and a value deep inside (a secret), each known at preview (what a StackReference's output is)."""
    js = json.dumps
    proxy = settings["proxy"]
    return {
        "whole": f"pulumi.output({js(settings)})",
        "one object": f"{{ ...{js(settings)}, cluster: pulumi.output({js(settings['cluster'])}) }}",
        "deep": (
            f"{{ ...{js(settings)}, proxy: {{ ...{js(proxy)}, upstream: {{ ...{js(proxy['upstream'])}, "
            f"url: pulumi.secret({js(proxy['upstream']['url'])}) }} }}, "
            f"namespaces: pulumi.output({js(settings['namespaces'])}) }}"
        ),
    }


def _go_shapes(settings: dict[str, Any]) -> dict[str, str]:
    """The same shapes from Go: a typed Output made with ApplyT (as from a StackReference's GetOutput), whole or for
    one object."""

    def decoded(value: Any, go_type: str) -> str:
        return (
            f"pulumi.String(`{json.dumps(value)}`).ToStringOutput().ApplyT(func(s string) (proxycomponent.{go_type}, "
            f"error) {{ var v proxycomponent.{go_type}; err := json.Unmarshal([]byte(s), &v); return v, err }})"
            f".(proxycomponent.{go_type}Output)"
        )

    return {
        "whole": f"\t\t\tSettings: {decoded(settings, 'Settings')},\n",
        "one object": f"\t\t\t\tCluster: {decoded(settings['cluster'], 'ClusterSettings')},\n",
    }


def _expect_the_same_objects(project: Project, shape: str) -> None:
    """The program, changed to pass the settings as Outputs, makes exactly the objects it made from plain values."""
    preview = project.run("preview", "--expect-no-changes", check=False)
    said = preview.stdout + preview.stderr
    assert preview.returncode == 0, f"{shape}: {said}"
    assert "Traceback" not in said


def _hand_written(rendered: dict[tuple[str, str, str], dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """Take the examples' hand-written Deployment `web` out of `rendered` and check it, field for field, against what
    the Python stack transform makes of the same Deployment without the env, mounts and volumes the component gave it.
    Empty volumes and volumeMounts lists, which the transform leaves out, count as none. Returns its container."""
    web = rendered.pop(WEB)
    bare = copy.deepcopy(web)
    pod = bare["spec"]["template"]["spec"]
    for container in pod["containers"]:
        container.pop("env", None)
        container.pop("volumeMounts", None)
    pod.pop("volumes", None)
    parsed = parse_settings(settings)
    args = pulumi.ResourceTransformArgs(
        custom=True, type_="kubernetes:apps/v1:Deployment", name="web", props=bare, opts=pulumi.ResourceOptions()
    )
    result = proxy_env_transform(parsed, plain_values(parsed))(args)
    assert result is not None, "the transform leaves the Deployment alone"
    assert _without_empty_lists(web) == _without_empty_lists(dict(result.props))
    written: dict[str, Any] = web["spec"]["template"]["spec"]["containers"][0]
    assert written["env"], "the example's container got no env"
    return written


def _without_empty_lists(obj: Any) -> Any:
    pod = copy.deepcopy(obj)["spec"]["template"]["spec"]
    for container in pod["containers"]:
        if container.get("volumeMounts") == []:
            del container["volumeMounts"]
    if pod.get("volumes") == []:
        del pod["volumes"]
    return pod


def _methods_as_python(outputs: dict[str, Any], settings: dict[str, Any]) -> None:
    """The TypeScript and Go examples' outputs are what Python gives for the same settings: the Python-safe NO_PROXY,
    helm_values_for("argo-cd", release="gitops"), kustomization(kind="Deployment", name="web", container="web") and,
    with a trusted CA, the trust group."""
    parsed = parse_settings(settings)
    values = plain_values(parsed).select(parsed.runtimes.cluster_wide)
    assert outputs["noProxyPython"] == values.no_proxy_python
    assert outputs["noProxyPython"] != outputs["noProxy"]  # the IPv6 ranges are left out
    assert outputs["argoCdValues"] == helm_values("argo-cd", profile_values(parsed, "argo-cd", release="gitops"))
    assert "gitops-argocd-repo-server" in json.dumps(outputs["argoCdValues"])
    assert outputs["webKustomization"] == kustomization(parsed, values, kind="Deployment", name="web", container="web")
    if parsed.trusted_ca is None:
        assert outputs.get("trust") is None
        return
    assert outputs["trust"] == {
        "env": trust_env_vars(),
        "volume": trust_volume(),
        "volumeMount": trust_volume_mount(),
        "jdkJavaOptions": values.java_trust_options,
    }


def test_a_yaml_program_writes_the_objects_the_python_example_writes(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    project = yaml_project(project_factory, hosts, plugin)
    up = project.up()
    assert "Traceback" not in up.stdout + up.stderr
    rendered = read_rendered(project.dir / "rendered")
    web = _hand_written(rendered, IPV6_ONLY)
    assert web["env"][-1] == {"name": "NODE_USE_ENV_PROXY", "value": "1"}  # runtimeEnv.node
    assert rendered == _render(IPV6_ONLY, tmp_path)
    outputs = project.outputs()
    assert outputs["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"
    assert {e["name"] for e in outputs["env"]} >= {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "no_proxy"}
    values = plain_values(parse_settings(IPV6_ONLY))
    assert outputs["noProxyPython"] == values.no_proxy_python
    assert outputs["jdkJavaOptions"] == values.java_options
    project.run("preview", "--expect-no-changes")
    # The same settings as Outputs (fn::secret makes one, as ${ref.outputs[...]} of a StackReference does), whole or
    # one object inside them: the same objects, no change.
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    shapes = {
        "whole": {"fn::secret": IPV6_ONLY},
        "one object": {**IPV6_ONLY, "cluster": {"fn::secret": IPV6_ONLY["cluster"]}},
    }
    for shape, settings in shapes.items():
        program["resources"]["proxy"]["properties"]["settings"] = settings
        (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
        _expect_the_same_objects(project, shape)


def test_the_trust_group_from_yaml_fills_a_pod_spec_as_the_transform_does(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    """A container reading proxy-config with envFrom, given ${proxy.trust}'s env, mount and volume: what the Python
    transform gives such a container (the trust group; the six come from proxy-config)."""
    project = yaml_project(project_factory, hosts, plugin)
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    program["resources"]["proxy"]["properties"]["settings"]["proxy"]["upstream"] = UPSTREAM
    pod = program["resources"]["web"]["properties"]["spec"]["template"]["spec"]
    pod["containers"][0]["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
    pod["containers"][0]["env"] = "${proxy.trust.env}"
    pod["containers"][0]["volumeMounts"] = ["${proxy.trust.volumeMount}"]
    pod["volumes"] = ["${proxy.trust.volume}"]
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
    project.up()
    rendered = read_rendered(project.dir / "rendered")
    web = _hand_written(rendered, WITH_TRUST)
    assert [e["name"] for e in web["env"]] == ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                               "NODE_EXTRA_CA_CERTS"]  # fmt: skip
    assert rendered == _render(WITH_TRUST, tmp_path)
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
    rendered = read_rendered(project.dir / "rendered")
    web = _hand_written(rendered, IPV6_ONLY)
    assert {e["name"] for e in web["env"]} >= {"JDK_JAVA_OPTIONS", "NODE_USE_ENV_PROXY"}  # runtimes "java,node"
    assert rendered == _render(IPV6_ONLY, tmp_path)
    outputs = project.outputs()
    assert outputs["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"
    _methods_as_python(outputs, IPV6_ONLY)
    project.run("preview", "--expect-no-changes")
    # Behind a TLS-inspecting proxy: containerEnv adds the trust group, its mount and the Pod's volume.
    source = (project.dir / "index.ts").read_text()
    trusted = source.replace('proxy: { noProxy: ["fd00::/8"] },',
                             f'proxy: {{ noProxy: ["fd00::/8"], upstream: {json.dumps(UPSTREAM)} }},')  # fmt: skip
    assert trusted.count("trustedCa") == 1
    (project.dir / "index.ts").write_text(trusted + "export const trust = egress.trust;\n")
    project.up()
    rendered = read_rendered(project.dir / "rendered")
    web = _hand_written(rendered, WITH_TRUST)
    assert web["volumeMounts"] == [trust_volume_mount()]
    assert rendered == _render(WITH_TRUST, tmp_path)
    _methods_as_python(project.outputs(), WITH_TRUST)
    project.run("preview", "--expect-no-changes")
    # The same settings as Outputs (as a StackReference gives them), whole or nested: the same objects, no change.
    base = trusted + "export const trust = egress.trust;\n"
    assert _TS_CALL.search(base)
    for shape, expression in _ts_shapes(WITH_TRUST).items():
        call = f'const egress = new proxy.ClusterProxy("egress", {{\n    settings: {expression},\n}}, {{ providers: [cluster] }});'
        (project.dir / "index.ts").write_text(_TS_CALL.sub(lambda _: call, base))  # noqa: B023
        _expect_the_same_objects(project, shape)


def pulumi_pin() -> str:
    """The `pulumi` SDK pin of constraints/engine.txt (the examples' Go SDK and @pulumi/pulumi equal it)."""
    return dict(engine_pins(ROOT))["pulumi"]


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
    assert f"github.com/pulumi/pulumi/sdk/v3 v{pulumi_pin()}" in gomod  # the example's, kept by package add
    project.init()
    up = project.up()
    assert "panic:" not in up.stdout + up.stderr
    rendered = read_rendered(project.dir / "rendered")
    web = _hand_written(rendered, IPV6_ONLY)
    assert {e["name"] for e in web["env"]} >= {"JDK_JAVA_OPTIONS", "NODE_USE_ENV_PROXY"}  # runtimes "java,node"
    assert rendered == _render(IPV6_ONLY, tmp_path)
    outputs = project.outputs()
    assert outputs["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"
    assert outputs["noProxy"] == next(e["value"] for e in outputs["env"] if e["name"] == "NO_PROXY")
    _methods_as_python(outputs, IPV6_ONLY)
    project.run("preview", "--expect-no-changes")
    # Behind a TLS-inspecting proxy: ContainerEnv adds the trust group, its mount and the Pod's volume.
    source = (project.dir / "main.go").read_text()
    upstream = (
        "Upstream: &proxycomponent.UpstreamSettingsArgs{Url: pulumi.String("
        f'"{UPSTREAM["url"]}"), TrustedCa: pulumi.String(`{CA.cert_pem}`)}}, '
    )
    trusted = source.replace(
        "Proxy:      &proxycomponent.ProxySettingsArgs{", f"Proxy: &proxycomponent.ProxySettingsArgs{{{upstream}"
    )
    assert trusted.count("TrustedCa") == 1
    (project.dir / "main.go").write_text(trusted)
    project.up()
    rendered = read_rendered(project.dir / "rendered")
    web = _hand_written(rendered, WITH_TRUST)
    assert web["volumeMounts"] == [trust_volume_mount()]
    assert rendered == _render(WITH_TRUST, tmp_path)
    _methods_as_python(project.outputs(), WITH_TRUST)
    project.run("preview", "--expect-no-changes")
    # The same settings as typed Outputs (as a StackReference's GetOutput and ApplyT give them): the same objects.
    base = trusted.replace("import (\n", 'import (\n\t"encoding/json"\n', 1)
    for shape, field in _go_shapes(WITH_TRUST).items():
        assert _GO_SETTINGS[shape].search(base), shape
        (project.dir / "main.go").write_text(_GO_SETTINGS[shape].sub(lambda _: field, base, count=1))  # noqa: B023
        _expect_the_same_objects(project, shape)


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
    rendered = read_rendered(project.dir / "rendered")
    settings["proxy"]["httpProxy"] = url
    web = _hand_written(rendered, settings)  # runtimeEnv.node: the URLs from the proxy-config Secret
    assert web["env"][0] == {"name": "HTTP_PROXY", "valueFrom": {"secretKeyRef": {"name": "proxy-config",
                                                                                 "key": "HTTP_PROXY"}}}  # fmt: skip
    kinds = {key[0] for key in rendered}
    assert kinds == {"Secret"}, "proxy-config is a Secret when the URLs carry credentials"
    assert rendered == _render(settings, tmp_path)


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
    rendered.pop(WEB)  # the example's own hand-written Deployment (its env: test_a_yaml_program_writes_...)
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


def test_a_bad_method_argument_from_typescript_fails_with_the_python_message(
    project_factory: Any, hosts: Path, plugin: Path
) -> None:
    """helmValuesFor with a bad release: the program fails with the line helm_values_for gives Python, no trace."""
    project = typescript_project(project_factory, hosts, plugin, "typescript-bad-release")
    source = (project.dir / "index.ts").read_text()
    bad = source.replace('release: "gitops"', 'release: "Git_Ops"')
    assert bad.count("Git_Ops") == 1
    (project.dir / "index.ts").write_text(bad)
    project.init()
    up = project.run("up", "--yes", "--skip-preview", check=False)
    assert up.returncode != 0
    output = up.stdout + up.stderr
    assert (
        "ClusterProxy.helmValuesFor: release: 'Git_Ops' is not a DNS-1123 label (expected 1-63 of a-z, 0-9 and '-', "
        "e.g. kube-system)" in output
    ), output
    assert "Traceback" not in output
    assert 'File "' not in output
