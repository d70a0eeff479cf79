"""The stack transform by value and by reference under the real engine (pytest -m engine): a NO_PROXY change
rewrites the Deployments by value, and by reference only `proxy-config`; the preview names the Deployments an update
restarts (a resource hook, run at preview), and says nothing on a preview that changes nothing. Rendered to a
directory (renderYamlToDirectory): no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from proxy_component.render.digest import REFERENCE, VALUES_ANNOTATION

from .conftest import Project, changes, read_rendered

NOTICE = "this update restarts its pods"


def _project(project_factory: Any, mode: str) -> Project:
    project: Project = project_factory("tests/fixtures/programs/transform-modes", "ci", mode)
    project.init()
    project.config("transformEnv", mode)
    project.up()
    return project


def _stamps(project: Project) -> dict[str, str]:
    objects = read_rendered(project.dir / "rendered")
    return {
        name: objects[("Deployment", "apps", name)]["spec"]["template"]["metadata"]["annotations"][VALUES_ANNOTATION]
        for name in ("web", "api")
    }


@pytest.mark.engine
def test_by_value_a_no_proxy_change_updates_every_deployment_and_the_preview_names_them(project_factory: Any) -> None:
    project = _project(project_factory, "value")
    before = _stamps(project)
    assert len(set(before.values())) == 1
    assert REFERENCE not in before.values()
    quiet = project.run("preview", "--diff")
    assert NOTICE not in quiet.stdout + quiet.stderr, "a preview that changes nothing says nothing"

    project.config("noProxy", [".corp.example"])
    preview = project.preview_json()
    assert changes(preview) == {"update": ["api", "egress-proxy-config-apps", "web"]}, preview
    said = project.run("preview")
    out = said.stdout + said.stderr
    print(out)
    for name in ("web", "api"):
        assert f"Deployment apps/{name}: {NOTICE}: the proxy values it is given by value changed (digest " in out, out
    project.up()
    after = _stamps(project)
    assert after["web"] == after["api"] != before["web"]


@pytest.mark.engine
def test_by_reference_a_no_proxy_change_updates_only_proxy_config(project_factory: Any) -> None:
    project = _project(project_factory, "reference")
    assert _stamps(project) == {"web": REFERENCE, "api": REFERENCE}
    objects = read_rendered(project.dir / "rendered")
    env = objects[("Deployment", "apps", "web")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert all("valueFrom" in e for e in env), env

    project.config("noProxy", [".corp.example"])
    preview = project.preview_json()
    assert changes(preview) == {"update": ["egress-proxy-config-apps"]}, preview
    said = project.run("preview")
    assert NOTICE not in said.stdout + said.stderr
    project.up()
    config = read_rendered(project.dir / "rendered")[("ConfigMap", "apps", "proxy-config")]
    assert config["data"]["PROXY_COMPONENT_NO_PROXY"].endswith(",.corp.example")
    # Switching back to values rewrites each template once, and the preview says so.
    project.config("transformEnv", "value")
    said = project.run("preview")
    out = said.stdout + said.stderr
    print(out)
    assert f"Deployment apps/web: {NOTICE}: its proxy env becomes values (digest " in out, out
