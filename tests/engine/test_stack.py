"""The per-cluster stack program under the real engine (pytest -m engine): `pulumi up` with a file backend and
renderYamlToDirectory, compared object for object with `proxy-component render`; previews read from
`pulumi preview --json`. The CLI, the Python host and the Kubernetes provider are the binaries scripts/engine
built; nothing is mocked.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.stack import PROVIDER_KEYS
from tests.pki import make_ca

from .conftest import LAYOUT_NAMED_AFTER_CLUSTER, ROOT, Project, as_written, changes, old_layout, read_rendered

pytestmark = pytest.mark.engine
NS = "proxy-component"
Key = tuple[str, str, str]
# The corporate example (seeds 001/002): upstream credentials, Kyverno, a Helm values Secret, Cluster API.
CORPORATE = yaml.safe_load((ROOT / "examples/corporate-proxy/proxy.yaml").read_text())
PASSWORD = CORPORATE["proxy"]["upstream"].pop("password")
# A TLS-inspecting upstream: its CA, made now (it must be valid), so the stack carries proxy-trust too.
CORPORATE["proxy"]["upstream"]["trustedCa"] = make_ca("Corp Inspecting CA").cert_pem


def stack_settings(project: Project) -> dict[str, Any]:
    """The settings a stack holds: its `proxy-component:` keys less the provider's, as the YAML file spells them."""
    config = yaml.safe_load(project.stack_file.read_text())["config"]
    return {
        key.split(":", 1)[1]: value
        for key, value in config.items()
        if key.startswith(f"{NS}:") and key.split(":", 1)[1] not in PROVIDER_KEYS
    }


def render(settings: dict[str, Any], tmp: Path, *extra: str) -> dict[Key, dict[str, Any]]:
    """`proxy-component render` of these settings, parsed and keyed like the rendered directory."""
    path = tmp / f"settings-{abs(hash(json.dumps(settings, sort_keys=True)))}.yaml"
    path.write_text(yaml.safe_dump(settings))
    result = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path), *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    objects: dict[Key, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(result.stdout):
        if doc and "kind" in doc and "metadata" in doc:
            objects[(doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])] = as_written(doc)
    return objects


def _read_without(root: Path, excluded: Path) -> dict[Key, dict[str, Any]]:
    objects: dict[Key, dict[str, Any]] = {}
    for sub in sorted(p for p in root.iterdir() if p != excluded):
        objects.update(read_rendered(sub))
    return objects


def dev(project_factory: Any, name: str = "p") -> Project:
    project: Project = project_factory(".", "dev", name)
    project.init()
    return project


def corporate(project_factory: Any) -> Project:
    """A stack of the corporate example: the password set with --secret, the management cluster rendered too."""
    project: Project = project_factory(".", "corp")
    project.init()
    project.config(f"{NS}:renderYamlToDirectory", "rendered/corp")
    for key, value in CORPORATE.items():
        project.config(f"{NS}:{key}", value)
    project.run("config", "set", "--secret", "--path", f"{NS}:proxy.upstream.password", PASSWORD)
    return project


# --- 1. parity -------------------------------------------------------------------------------------------------


def test_up_of_dev_writes_exactly_what_render_writes(project_factory: Any, tmp_path: Path) -> None:
    project = dev(project_factory)
    up = project.up()
    assert "7 created" in up.stdout, up.stdout
    rendered = _read_without(project.dir / "rendered/dev", project.dir / "rendered/dev/management")
    assert rendered == render(stack_settings(project), tmp_path)


def test_up_with_credentials_kyverno_and_capi_writes_what_render_writes(project_factory: Any, tmp_path: Path) -> None:
    project = corporate(project_factory)
    up = project.up()
    root = project.dir / "rendered/corp"
    settings = {**copy.deepcopy(CORPORATE)}
    settings["proxy"]["upstream"]["password"] = PASSWORD
    assert _read_without(root, root / "management") == render(settings, tmp_path)
    assert read_rendered(root / "management") == render(settings, tmp_path, "--format", "capi")
    trust = [key for key in read_rendered(root) if key[0] == "ConfigMap" and key[2] == "proxy-trust"]
    assert trust, "the corporate CA's bundle, with its binaryData truststore, written by the engine"
    # The password only in Secrets: nowhere in the output, the state or a non-Secret object.
    assert PASSWORD not in up.stdout + up.stderr
    assert PASSWORD not in json.dumps(project.export())
    for path in root.rglob("*.yaml"):
        if PASSWORD in path.read_text():
            assert yaml.safe_load(path.read_text())["kind"] == "Secret", path


# --- 2. zero churn ---------------------------------------------------------------------------------------------


def test_no_changes_after_up_nor_after_lists_are_shuffled_duplicated_and_respelled(project_factory: Any) -> None:
    project = dev(project_factory)
    project.up()
    project.run("preview", "--expect-no-changes")
    data = yaml.safe_load(project.stack_file.read_text())
    config = data["config"]
    cluster = config[f"{NS}:cluster"]
    cluster["nodeCidrs"] = ["FD00:10:0:0::/64", "10.1.2.3/8", "10.0.0.0/8"]  # reversed, host bits, upper case
    cluster["podCidrs"] = ["fd00:10:244:0::/56", "fd00:10:244::/56"]
    cluster["apiServerIps"] = ["FD00:10:96:0:0:0:0:1"]
    config[f"{NS}:proxy"]["noProxy"] = ["FD00::/8", "fd00::/8"]
    config[f"{NS}:namespaces"] = ["default", "default"]
    project.stack_file.write_text(yaml.safe_dump(data, sort_keys=False))
    project.run("preview", "--expect-no-changes")


# --- 3. diffs --------------------------------------------------------------------------------------------------


def _edit(project: Project, change: Any) -> None:
    data = yaml.safe_load(project.stack_file.read_text())
    change(data["config"])
    project.stack_file.write_text(yaml.safe_dump(data, sort_keys=False))


def _differing(before: dict[Key, Any], after: dict[Key, Any]) -> set[Key]:
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}


def _names(project: Project, keys: set[Key]) -> list[str]:
    """The logical names of the objects `keys` names, read from the state's resources."""
    by_key: dict[Key, str] = {}
    for resource in project.export()["deployment"]["resources"]:
        outputs = resource.get("outputs", {})
        if "kind" in outputs and "metadata" in outputs:
            meta = outputs["metadata"]
            by_key[(outputs["kind"], meta.get("namespace", ""), meta["name"])] = resource["urn"].split("::")[-1]
    return sorted(by_key[key] for key in keys)


def test_a_namespace_added_is_one_create(project_factory: Any) -> None:
    project = dev(project_factory)
    project.up()
    _edit(project, lambda c: c[f"{NS}:namespaces"].append("team-a"))
    assert changes(project.preview_json()) == {"create": ["dev-proxy-config-team-a"]}


def test_a_pod_cidr_change_updates_what_carries_it_and_replaces_nothing(project_factory: Any, tmp_path: Path) -> None:
    project = dev(project_factory)
    project.up()
    before = render(stack_settings(project), tmp_path)
    _edit(project, lambda c: c[f"{NS}:cluster"].update(podCidrs=["fd00:10:245::/56"]))
    after = render(stack_settings(project), tmp_path)
    touched = _differing(before, after)
    # What the change must reach: the objects holding NO_PROXY (proxy-config) or Allow (the config, the digest).
    assert {k[0] for k in touched} == {"ConfigMap", "DaemonSet"}, touched
    assert changes(project.preview_json()) == {"update": _names(project, touched)}


def test_a_password_change_touches_only_secrets(project_factory: Any, tmp_path: Path) -> None:
    """No pod template changes (issue 35 item 1: tinyproxy reloads the new password in place) and nothing derived from
    the password is outside a Secret (issue 37 item 4: the DaemonSet's scrypt config digest was an oracle)."""
    project = corporate(project_factory)
    project.up()
    settings = copy.deepcopy(CORPORATE)
    settings["proxy"]["upstream"]["password"] = PASSWORD
    before = {**render(settings, tmp_path), **render(settings, tmp_path, "--format", "capi")}
    new_password = "n3w-Passw0rd-9f41"
    settings["proxy"]["upstream"]["password"] = new_password
    after = {**render(settings, tmp_path), **render(settings, tmp_path, "--format", "capi")}
    touched = _differing(before, after)
    assert {k[0] for k in touched} == {"Secret"}, touched

    project.run("config", "set", "--secret", "--path", f"{NS}:proxy.upstream.password", new_password)
    preview = project.run("preview", "--json")
    assert changes(json.loads(preview.stdout)) == {"update": _names(project, touched)}
    text = project.run("preview", "--diff")
    project.up()
    for secret in (PASSWORD, new_password):
        assert secret not in preview.stdout + preview.stderr + text.stdout + text.stderr
        assert secret not in json.dumps(project.export())
        for path in (project.dir / "rendered/corp").rglob("*.yaml"):
            if secret in path.read_text():
                assert yaml.safe_load(path.read_text())["kind"] == "Secret", path


def _diff_paths(a: Any, b: Any, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            p for k in sorted(a.keys() | b.keys()) for p in _diff_paths(a.get(k), b.get(k), f"{at}.{k}" if at else k)
        ]
    return [] if a == b else [at]


# --- 4. identity across upgrades -------------------------------------------------------------------------------


def test_project_level_settings_are_merged_under_the_stacks_never_dropped(project_factory: Any, tmp_path: Path) -> None:
    """Settings in Pulumi.yaml's project `config:` and a stack that sets one key under the same object: Pulumi hands
    the program the stack's object alone; the program merges the project's under it by the fleet's rules (the
    upstream kept, the noProxy lists joined), `render --stack` the same, and a value both set differently fails
    naming both files."""
    project = dev(project_factory)
    layout = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    upstream = {"url": "http://proxy.corp.example:3128", "noUpstream": [".corp.example"]}
    layout["config"][f"{NS}:proxy"] = {"value": {"upstream": upstream, "noProxy": [".corp.example"]}}
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(layout, sort_keys=False))
    project.run("config", "set", "--path", f"{NS}:proxy.noProxy[1]", "registry.example")
    up = project.up()
    assert "Traceback" not in up.stdout + up.stderr
    merged = stack_settings(project)
    assert merged["proxy"] == {"noProxy": ["fd00::/8", "registry.example"]}  # what the stack file holds
    merged["proxy"] = {"upstream": upstream, "noProxy": [".corp.example", "fd00::/8", "registry.example"]}
    rendered = _read_without(project.dir / "rendered/dev", project.dir / "rendered/dev/management")
    assert rendered == render(merged, tmp_path)
    assert "Upstream http proxy.corp.example:3128" in json.dumps(list(rendered.values()))
    cli = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", "--stack", "dev"],
        cwd=project.dir, env=project.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    streamed = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): as_written(d)
        for d in yaml.safe_load_all(cli.stdout)
        if d
    }
    assert streamed == rendered
    project.run("config", "set", "--path", f"{NS}:proxy.upstream.url", "http://other.corp.example:3128")
    failed = project.run("preview", check=False)
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert (
        "proxy.upstream.url: set by the project (Pulumi.yaml config) and by this stack (stack dev); it belongs to "
        "one layer: remove it from one of them"
    ) in output, output
    assert "Traceback" not in output


def test_a_stack_of_the_last_layout_upgrades_with_no_replace_and_no_delete(project_factory: Any) -> None:
    """The layout before the component was named after the stack: its objects are kept through aliases."""
    project = dev(project_factory)
    with old_layout(project, LAYOUT_NAMED_AFTER_CLUSTER):
        project.up()
    old_urns = {r["urn"] for r in project.export()["deployment"]["resources"]}
    assert any(urn.endswith("ClusterProxy::ipv6-only") for urn in old_urns), old_urns
    ops = changes(project.preview_json())
    assert not {"replace", "create-replacement", "delete-replaced", "delete", "create"} & ops.keys(), ops
    project.up()
    new_urns = {r["urn"] for r in project.export()["deployment"]["resources"]}
    assert any(urn.endswith("ClusterProxy::dev") for urn in new_urns), new_urns
    assert len(new_urns) == len(old_urns)
    project.run("preview", "--expect-no-changes")


# --- 5. examples -----------------------------------------------------------------------------------------------


# --- 8. bad config ---------------------------------------------------------------------------------------------


def test_bad_stack_config_fails_with_the_field_naming_message_and_no_traceback(
    project_factory: Any, tmp_path: Path
) -> None:
    project = dev(project_factory)
    _edit(project, lambda c: c[f"{NS}:cluster"].update(podCidrs=["10.0.0.1/33"]))
    up = project.run("up", "--yes", check=False)
    assert up.returncode != 0
    settings = tmp_path / "bad.yaml"
    settings.write_text(yaml.safe_dump(stack_settings(project)))
    cli = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(settings)], capture_output=True, text=True, cwd=ROOT
    )
    message = cli.stderr.removeprefix("proxy-component: ").strip()
    assert "cluster.podCidrs[0]: '10.0.0.1/33' is not a CIDR" in message
    output = up.stdout + up.stderr
    for line in message.splitlines():
        assert line.strip() in output, f"{line!r} not in:\n{output}"
    assert "Traceback" not in output
    assert "unhandled exception" not in output
