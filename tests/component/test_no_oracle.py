"""Issue 37 item 4, "No oracle": nothing outside a Secret is derived from a credential.

The property, tested directly: render (and register under mocks, with the stack transform on a workload, and a
preview's logs) the same settings with two different passwords. Everything that is not a Secret, every non-secret
output and every log line is identical for both, so no annotation, label, name, digest or text depends on the
password, whatever the function that would derive it (a hash, keyed or not, a length, a prefix). And neither password
appears outside a Secret, raw, percent-encoded, or as the Basic credentials a proxy receives.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any
from urllib.parse import quote

import pulumi
import pulumi_kubernetes as k8s
import pytest

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.render import capi_manifests, manifests, plain_values
from proxy_component.render.kustomize import kustomization
from proxy_component.settings import parse_settings
from proxy_component.transform import inject_proxy_env
from tests.conftest import Harness, harness

FIRST, SECOND = "Fir5t/pa:ss%word", "Sec0nd-pa55word"
CLUSTER = {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"], "nodeCidrs": ["192.168.0.0/24"]}


def _cases(password: str) -> dict[str, dict[str, Any]]:
    secret = quote(password, safe="")
    return {
        "upstream URL": {
            "cluster": CLUSTER,
            "namespaces": ["apps"],
            "proxy": {"upstream": {"url": f"http://svc:{secret}@proxy.corp.example:3128", "noUpstream": ["corp"]}},
            "helmValuesSecrets": [{"profile": "argo-cd", "namespace": "apps"}],
        },
        "upstream fields, capi": {
            "cluster": {**CLUSTER, "name": "prod"},
            "namespaces": ["apps", "web"],
            "proxy": {"upstream": {"url": "http://proxy.corp.example:3128", "username": "svc", "password": password}},
            "capi": {"enabled": True},
        },
        "pods' URLs, every injection": {
            "cluster": CLUSTER,
            "namespaces": ["apps"],
            "proxy": {"httpProxy": f"http://svc:{secret}@proxy.corp.example:3128"},
            "deployment": {"enabled": False},
            "injection": {"admission": True, "kyverno": True, "transformEnv": "reference"},
            "helmValuesSecrets": [{"profile": "cert-manager", "namespace": "apps"}],
        },
        "pods' URLs, Kyverno ClusterPolicy": {
            "cluster": CLUSTER,
            "namespaces": ["apps"],
            "proxy": {"httpProxy": f"http://svc:{secret}@proxy.corp.example:3128"},
            "deployment": {"enabled": False},
            "injection": {"kyverno": True, "kyvernoPolicy": "ClusterPolicy"},
        },
    }


def _spellings(password: str) -> list[str]:
    basic = base64.b64encode(f"svc:{password}".encode()).decode()
    return [password, quote(password, safe=""), basic, password.lower(), password.upper()]


def _outside_secrets(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] != "Secret"]


@pytest.mark.parametrize("case", sorted(_cases(FIRST)))
def test_every_rendered_object_but_the_secrets_is_the_same_for_any_password(case: str) -> None:
    rendered = {}
    for password in (FIRST, SECOND):
        settings = parse_settings(_cases(password)[case])
        objects = manifests(settings) + (capi_manifests(settings) if settings.capi.enabled else [])
        values = plain_values(settings)
        objects.append(kustomization(settings, values, kind="Deployment", name="web"))
        rendered[password] = objects
        secrets = [o for o in objects if o["kind"] == "Secret"]
        assert secrets, "the credentials are somewhere: in Secrets"
        text = json.dumps(_outside_secrets(objects))
        for spelling in _spellings(FIRST) + _spellings(SECOND):
            assert spelling not in text, (case, spelling)
    assert _outside_secrets(rendered[FIRST]) == _outside_secrets(rendered[SECOND])
    kinds = {o["kind"] for o in _outside_secrets(rendered[FIRST])}
    assert kinds, case


def _program(mocked: Harness, raw: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Register the component and one workload through the stack transform; what was registered, the outputs."""

    def body() -> ClusterProxy:
        proxy = ClusterProxy("egress", ClusterProxyArgs(settings=copy.deepcopy(raw)))
        inject_proxy_env(proxy)
        container = {"name": "web", "image": "web:1"}
        spec: Any = {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}},
        }
        k8s.apps.v1.Deployment("web", metadata={"name": "web", "namespace": "apps"}, spec=spec)
        return proxy

    proxy = mocked.program(body)
    outputs: dict[str, Any] = {}
    for name in ("no_proxy", "proxy_url", "no_proxy_python", "jdk_java_options", "runtime_env", "trust"):
        output = getattr(proxy, name)
        if isinstance(output, pulumi.Output) and not mocked.secret(output):
            outputs[name] = mocked.value(output)
    return mocked.settle(), outputs


@pytest.mark.parametrize("case", ["upstream URL", "upstream fields, capi"])
def test_the_component_registers_nothing_outside_secrets_that_depends_on_the_password(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: dict[str, Any] = {}
    for password in (FIRST, SECOND):
        for mocked in harness(preview=True):
            registered, outputs = _program(mocked, _cases(password)[case])
            logs = sorted(line for line in mocked.logs(caplog) if line[0] != "DEBUG")  # the engine's own, async
            caplog.clear()
            plain = sorted(
                (r.typ, r.name, json.dumps(r.inputs, sort_keys=True, default=str))
                for r in registered
                if r.typ != "kubernetes:core/v1:Secret"
            )
            text = json.dumps([plain, outputs, logs], default=str)
            for spelling in _spellings(FIRST) + _spellings(SECOND):
                assert spelling not in text, (case, spelling)
            seen[password] = (plain, outputs, logs)
    assert seen[FIRST] == seen[SECOND]
    assert seen[FIRST][2], "the preview's warnings are among what is compared"
    workload = [p for p in seen[FIRST][0] if p[0] == "kubernetes:apps/v1:Deployment"]
    assert workload, "the transform's workload is among what is compared"
