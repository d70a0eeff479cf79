"""A fleet under the real engine (pytest -m engine): one installation stack and three cluster stacks of the root
program, a file backend, one passphrase. The installation's upstream (with its password, set with --secret), CA and
noProxy reach every cluster's objects; each cluster adds its own entries and namespaces; a cluster that sets a key the
installation sets fails naming both; a rotation of the installation's password is one `up` of the installation,
then an update of the proxy's config Secret alone in each cluster (reloaded in place); the password is in no output, export or plain file.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pki import make_ca

from . import test_languages as languages
from .conftest import ROOT, Project, read_rendered
from .test_languages import typescript_project
from .test_stack import render

pytestmark = pytest.mark.engine
hosts = languages.hosts  # the fixtures, shared with the languages' tests
plugin = languages.plugin
NS = "proxy-component"
PASSWORD = "Fleet-Pa55-4411"
ROTATED = "Fleet-R0tated-9902"
CA = make_ca("Corp Inspecting CA").cert_pem
INSTALLATION: dict[str, Any] = {
    "proxy": {
        "upstream": {
            "url": "http://proxy.corp.example:3128",
            "username": "svc-proxy",
            "noUpstream": [".corp.example"],
            "trustedCa": CA,
        },
        "noProxy": [".corp.example", "registry.corp.example"],
    },
    "namespaces": ["default"],
}
CLUSTERS = {
    "eu": {"podCidrs": ["10.10.0.0/16"], "serviceCidrs": ["10.11.0.0/16"], "nodeCidrs": ["10.12.0.0/16"]},
    "us": {"podCidrs": ["10.20.0.0/16"], "serviceCidrs": ["10.21.0.0/16"], "nodeCidrs": ["10.22.0.0/16"]},
    "ap": {"podCidrs": ["fd00:30::/56"], "serviceCidrs": ["fd00:31::/108"], "nodeCidrs": ["10.32.0.0/16"]},
}


def _merged(name: str, password: str) -> dict[str, Any]:
    """What a cluster's settings must come to, written out by hand from the merge rules in docs/guides/fleet.md."""
    upstream = {**INSTALLATION["proxy"]["upstream"], "password": password}
    return {
        "proxy": {"upstream": upstream, "noProxy": [".corp.example", "registry.corp.example", f".{name}.internal"]},
        "namespaces": ["default", f"apps-{name}"],
        "cluster": {"name": name, **CLUSTERS[name]},
    }


def _cli(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    """The command, in the stack's project directory with the stack's backend and passphrase."""
    return subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", *args], cwd=project.dir, env=project.env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture
def fleet(project_factory: Any) -> tuple[Project, list[str]]:
    """The installation stack `fleet` and the three cluster stacks, each up; every stdout and stderr kept."""
    project: Project = project_factory(".", "fleet", "fleet")
    said: list[str] = []
    project.init()
    project.config(f"{NS}:layer", "installation")
    for key, value in INSTALLATION.items():
        project.config(f"{NS}:{key}", value)
    project.run("config", "set", "--secret", "--path", f"{NS}:proxy.upstream.password", PASSWORD)
    up = project.up()
    said.append(up.stdout + up.stderr)
    assert project.outputs()["installation"] == "[secret]"
    for name, network in CLUSTERS.items():
        project.stack = name
        project.init()
        project.config(f"{NS}:renderYamlToDirectory", f"rendered/{name}")
        project.config(f"{NS}:installationStack", "fleet")
        project.config(f"{NS}:cluster", {"name": name, **network})
        project.config(f"{NS}:proxy", {"noProxy": [f".{name}.internal", "registry.corp.example"]})
        project.config(f"{NS}:namespaces", [f"apps-{name}"])
        up = project.up()
        said.append(up.stdout + up.stderr)
    return project, said


def _decoded(obj: dict[str, Any]) -> str:
    """An object's text with a Secret's data decoded, as the API server would serve it."""
    data = (
        {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()} if obj["kind"] == "Secret" else {}
    )
    return json.dumps([obj, data])


def _no_password_anywhere(project: Project, said: list[str], *passwords: str) -> None:
    for password in passwords:
        for text in said:
            assert password not in text
        for stack in ("fleet", *CLUSTERS):
            project.stack = stack
            assert password not in json.dumps(project.export())
        for path in project.dir.rglob("*"):
            if path.is_file() and password.encode() in path.read_bytes():
                assert path.suffix == ".yaml", path
                assert yaml.safe_load(path.read_text())["kind"] == "Secret", path


def test_the_installation_reaches_every_cluster_which_adds_its_own(
    fleet: tuple[Project, list[str]], tmp_path: Path
) -> None:
    project, said = fleet
    for name in CLUSTERS:
        rendered = read_rendered(project.dir / f"rendered/{name}")
        assert rendered == render(_merged(name, PASSWORD), tmp_path), name
        config = rendered[("ConfigMap", f"apps-{name}", "proxy-config")]["data"]
        assert ".corp.example" in config["NO_PROXY"].split(",")
        assert f".{name}.internal" in config["NO_PROXY"].split(",")
        assert ("ConfigMap", "default", "proxy-trust") in rendered
        assert ("ConfigMap", f"apps-{name}", "proxy-trust") in rendered
    # The command reads a stack's settings as its program does: the same objects, each entry's layer named.
    project.stack = "eu"
    cli = _cli(project, "render", "--stack", "eu")
    assert cli.returncode == 0, cli.stderr
    streamed = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        for d in yaml.safe_load_all(cli.stdout)
        if d
    }
    assert streamed == set(read_rendered(project.dir / "rendered/eu"))
    assert "proxy.upstream.password: installation" in cli.stderr
    assert "cluster.podCidrs[0]: cluster" in cli.stderr
    explain = _cli(project, "explain", "--stack", "eu")
    assert explain.returncode == 0, explain.stderr
    assert "proxy.noProxy[0] (installation)" in explain.stdout
    assert "proxy.noProxy[2] (cluster)" in explain.stdout
    said += [cli.stderr, explain.stdout, explain.stderr]
    _no_password_anywhere(project, said, PASSWORD)


def test_a_cluster_that_sets_what_the_installation_sets_fails_naming_both(fleet: tuple[Project, list[str]]) -> None:
    project, said = fleet
    project.stack = "us"
    project.run("config", "set", "--path", f"{NS}:proxy.upstream.url", "http://other-proxy.corp.example:3128")
    preview = project.run("preview", check=False)
    output = preview.stdout + preview.stderr
    assert preview.returncode != 0
    assert (
        "proxy.upstream.url: set by the installation (stack fleet) and by this cluster (stack us); it belongs to one "
        "layer: remove it from one of them"
    ) in output
    assert "Traceback" not in output
    said.append(output)
    _no_password_anywhere(project, said, PASSWORD)


def test_a_password_rotation_is_one_change_then_the_secret_alone_in_each_cluster(
    fleet: tuple[Project, list[str]],
) -> None:
    project, said = fleet
    project.stack = "fleet"
    project.run("config", "set", "--secret", "--path", f"{NS}:proxy.upstream.password", ROTATED)
    up = project.up()
    said.append(up.stdout + up.stderr)
    for name in CLUSTERS:
        project.stack = name
        preview = project.run("preview", "--json")
        said.append(preview.stderr)
        steps = [s for s in json.loads(preview.stdout)["steps"] if s["op"] not in ("same", "refresh")]
        kinds = {s["urn"].split("::")[-2].rsplit("$", 1)[-1]: s["op"] for s in steps}
        assert set(kinds.values()) == {"update"}, steps
        # The proxy's config Secret alone: tinyproxy reloads it in place, the DaemonSet is not rolled (issue 35).
        assert set(kinds) == {"kubernetes:core/v1:Secret"}, kinds
        text = project.run("preview", "--diff")
        said.append(text.stdout + text.stderr)
        up = project.up()
        said.append(up.stdout + up.stderr)
        rendered = read_rendered(project.dir / f"rendered/{name}")
        holding = [key for key, obj in rendered.items() if ROTATED in _decoded(obj)]
        assert holding, name
        assert {key[0] for key in holding} == {"Secret"}, holding
    _no_password_anywhere(project, said, PASSWORD, ROTATED)


def test_the_root_project_declares_the_layer_keys() -> None:
    """The keys the program reads are in the root Pulumi.yaml, with their descriptions."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    for key in ("layer", "installationStack"):
        assert f"{NS}:{key}" in declared


# --- the same fleet from TypeScript: ClusterProxy's installation inputs, no glue --------------------------------

TS_PROGRAM = """import * as pulumi from "@pulumi/pulumi";
import * as proxy from "@pulumi/proxy-component";

class KubernetesProvider extends pulumi.ProviderResource {
    constructor(name: string, props: pulumi.Inputs) {
        super("kubernetes", name, props);
    }
}
const cluster = new KubernetesProvider("cluster", {
    renderYamlToDirectory: "rendered",
    enableConfigMapMutable: "true",
    enableSecretMutable: "true",
});
const egress = new proxy.ClusterProxy("egress", {
    LAYER,
    settings: SETTINGS,
}, { providers: [cluster] });
export const noProxy = egress.noProxy;
export const proxyUrl = egress.proxyUrl;
export const env = egress.env;
"""
FLEET_STACK = "organization/proxy-component/fleet"
BY_NAME = f'installationStack: "{FLEET_STACK}"'
BY_OUTPUT = f'installation: new pulumi.StackReference("{FLEET_STACK}").requireOutput("installation")'


def _ts_cluster(name: str, **proxy: Any) -> dict[str, Any]:
    """A cluster's own settings as the cluster stacks of `fleet` set them."""
    return {
        "cluster": {"name": name, **CLUSTERS[name]},
        "proxy": {"noProxy": [f".{name}.internal", "registry.corp.example"], **proxy},
        "namespaces": [f"apps-{name}"],
    }


def test_a_typescript_cluster_takes_the_installation_stack_with_no_glue(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    """Must-show 1 of issue 37: the installation stack of the root program, read by a TypeScript program's
    ClusterProxy by name (`installationStack`) or as a StackReference's output (`installation`): the objects are
    `render` of the merged settings, and a value both layers set fails naming both, in either form."""
    root: Project = project_factory(".", "fleet", "fleet")
    root.init()
    root.config(f"{NS}:layer", "installation")
    for key, value in INSTALLATION.items():
        root.config(f"{NS}:{key}", value)
    root.run("config", "set", "--secret", "--path", f"{NS}:proxy.upstream.password", PASSWORD)
    said = [root.up().stdout]
    ts = typescript_project(project_factory, hosts, plugin, "ts-eu")
    ts.env["PULUMI_BACKEND_URL"] = root.env["PULUMI_BACKEND_URL"]
    ts.stack = "eu"
    ts.init()
    index = ts.dir / "index.ts"

    def program(layer: str, settings: dict[str, Any]) -> None:
        index.write_text(TS_PROGRAM.replace("LAYER", layer).replace("SETTINGS", json.dumps(settings)))

    program(BY_NAME, _ts_cluster("eu"))
    up = ts.up()
    said.append(up.stdout + up.stderr)
    assert read_rendered(ts.dir / "rendered") == render(_merged("eu", PASSWORD), tmp_path)
    assert ts.outputs()["proxyUrl"] == "http://http-proxy.kube-system.svc.cluster.local:8888"
    program(BY_OUTPUT, _ts_cluster("eu"))
    same = ts.run("preview", "--expect-no-changes", check=False)
    said.append(same.stdout + same.stderr)
    assert same.returncode == 0, same.stdout + same.stderr
    # A value both layers set: an error naming both, from either form; nothing is changed.
    other = _ts_cluster("eu", upstream={"url": "http://other-proxy.corp.example:3128"})
    for layer, source in ((BY_NAME, f"stack {FLEET_STACK}"), (BY_OUTPUT, "installation")):
        program(layer, other)
        failed = ts.run("preview", check=False)
        output = failed.stdout + failed.stderr
        said.append(output)
        assert failed.returncode != 0
        assert (
            f"proxy.upstream.url: set by the installation ({source}) and by this cluster (ClusterProxy settings); "
            "it belongs to one layer: remove it from one of them"
        ) in output, output
        assert "Traceback" not in output
        assert "    at " not in output
    # Both forms at once: one layer only.
    program(f"{BY_NAME}, {BY_OUTPUT}", _ts_cluster("eu"))
    both = ts.run("preview", check=False)
    said.append(both.stdout + both.stderr)
    assert "installation and installationStack: both set" in both.stdout + both.stderr
    for text in said:
        assert PASSWORD not in text
    assert PASSWORD not in json.dumps(ts.export())
    for path in ts.dir.rglob("*"):
        if path.is_file() and "node_modules" not in path.parts and PASSWORD.encode() in path.read_bytes():
            assert yaml.safe_load(path.read_text())["kind"] == "Secret", path
