"""A test cluster of a module's own: `scripts/cluster up NODES` (kube-apiserver, controller-manager, scheduler and
etcd with kwok's fake nodes, on 127.0.0.1) under a name and work directory of its own, taken down on exit; at the
script's default Kubernetes version or another one (`K8S_VERSION`, built and cached by version by the script).

The older Kubernetes minors the product supports are tested targets too: `VERSIONS` parametrizes a module's cluster
fixture over the default version and each of `OLDER` (those runs marked `older`: `pytest -m older`)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

OLDER = ("v1.36.3", "v1.35.4")
"""The supported Kubernetes minors older than the default (1.35, 1.36 and 1.37 are maintained on 2026-11-28), each at
its newest patch the Go module proxy serves. .ci/run reads this line to build the oldest's control plane."""
OLDEST = OLDER[-1]
VERSIONS = [
    pytest.param(None, id="default"),
    *(
        pytest.param(
            v,
            id=v.lstrip("v").rsplit(".", 1)[0],
            marks=[pytest.mark.older, *([pytest.mark.oldest] if v == OLDEST else [])],
        )
        for v in OLDER
    ),
]
"""A module-scoped cluster fixture's params: the script's default version, then each of OLDER (the `older` lane;
OLDEST's marked `oldest` too: what CI runs, since each older control plane is a build of its own, about 7 CPU-minutes
cold, and the versions between the default and the oldest are run by hand: docs/guides/kubernetes-versions.md)."""
ADMISSION_GA_MINOR = 36
"""Before it (1.34, 1.35), kube-apiserver serves MutatingAdmissionPolicy (v1beta1) only with its feature gate on."""


def minor(version: str | None) -> int | None:
    """35 for 'v1.35.4'; None for the script's default."""
    return None if version is None else int(version.lstrip("v").split(".")[1])


def settings_version(version: str | None) -> str | None:
    """`cluster.kubernetesVersion` for a cluster of `version` ('1.35'), None for the default (left unset, as the
    settings the tests of the default version always used)."""
    return None if version is None else f"1.{minor(version)}"


def version_config(version: str | None, config: str | None = None) -> str | None:
    """`config` (a KwokctlConfiguration document or None) with what a cluster of `version` needs: on 1.34 and 1.35,
    the MutatingAdmissionPolicy feature gate and admissionregistration.k8s.io/v1beta1 in the runtime config (what
    the product's v1beta1 policy needs there, and what a user of those versions turns on); nothing otherwise."""
    m = minor(version)
    if m is None or m >= ADMISSION_GA_MINOR:
        return config
    doc: dict[str, Any] = yaml.safe_load(config) if config else {}
    doc.setdefault("apiVersion", "config.kwok.x-k8s.io/v1alpha1")
    doc.setdefault("kind", "KwokctlConfiguration")
    options = doc.setdefault("options", {})
    for key, item in (
        ("kubeFeatureGates", "MutatingAdmissionPolicy=true"),
        ("kubeRuntimeConfig", "admissionregistration.k8s.io/v1beta1=true"),
    ):
        items = [i for i in str(options.get(key) or "").split(",") if i]
        options[key] = ",".join(items if item in items else [*items, item])
    return yaml.safe_dump(doc, sort_keys=False)


@contextmanager
def kwok_cluster(
    workdir: Path, name: str, nodes: int, config: str | None = None, version: str | None = None
) -> Iterator[Path]:
    """The kubeconfig of a cluster named `name`-<pid> with `nodes` kwok nodes; the test fails if it does not start
    or stop. `config`: a KwokctlConfiguration document added to the script's (PROXY_COMPONENT_CLUSTER_CONFIG).
    `version`: Kubernetes' (`v1.35.4`; K8S_VERSION), None for the script's default; the API server is checked to
    be of that version, and `version_config` adds what that version needs to `config`."""
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": f"{name}-{os.getpid()}", "KWOK_WORKDIR": str(workdir / "kwok")}
    if version is not None:
        env["K8S_VERSION"] = version
    config = version_config(version, config)
    if config is not None:
        (workdir / "kwokctl-extra.yaml").write_text(config)
        env["PROXY_COMPONENT_CLUSTER_CONFIG"] = str(workdir / "kwokctl-extra.yaml")
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", str(nodes)], capture_output=True, text=True,
                        env=env, timeout=3000)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster up failed: {up.stderr}")
    try:
        kubeconfig = Path(up.stdout.strip().splitlines()[-1])
        if version is not None:
            served = server_version(kubeconfig)
            assert served == version, f"scripts/cluster up with K8S_VERSION={version} started {served}"
        yield kubeconfig
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True,
                              env=env, timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr


def server_version(kubeconfig: Path) -> str:
    """The API server's gitVersion (`v1.35.4`)."""
    result = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "version", "-o", "json"], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, f"kubectl version: {result.stderr}"
    git_version: str = json.loads(result.stdout)["serverVersion"]["gitVersion"]
    return git_version


def proxy_pods_on(
    kubeconfig: Path, expected: set[str], timeout: float = 90, hold: float = 2
) -> dict[str, dict[str, Any]]:
    """The live proxy pods by node once the DaemonSet controller has put them on exactly `expected` and kept them
    there for `hold` seconds; the test fails with what it saw if that does not happen within `timeout`.

    Waiting for the set rather than for a settled status: the controller reports a settled status for the state it
    has seen so far (nodes created or relabelled a moment ago may not be in its cache yet, and a relabel does not
    change the DaemonSet's generation), so "settled" alone returned an empty or an old placement."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    seen: tuple[dict[str, Any], list[str]] = ({}, [])
    while True:
        ds = _get(kubeconfig, "-n", "kube-system", "daemonset", "http-proxy")
        pods = _get(kubeconfig, "-n", "kube-system", "pods", "-l", "app=http-proxy")["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        bound = {p["spec"].get("nodeName") or "(unbound)": p for p in live}
        status = ds.get("status", {})
        settled = status.get("observedGeneration") == ds["metadata"]["generation"] and len(live) == len(
            bound
        ) == status.get("desiredNumberScheduled") == len(expected)
        seen = (status, sorted(bound))
        now = time.monotonic()
        if settled and set(bound) == expected:
            since = now if since is None else since
            if now - since >= hold:
                return bound
        else:
            since = None
        assert now < deadline, f"the proxy pods did not settle on {sorted(expected)}: status {seen[0]}, on {seen[1]}"
        time.sleep(0.5)


def _get(kubeconfig: Path, *args: str) -> dict[str, Any]:
    result = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", *args, "-o", "json"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, f"kubectl get {' '.join(args)}: {result.stderr}"
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


class PodRefusedError(Exception):
    """The API server refused a Pod (admission, validation): its status message."""


class Pods:
    """A test cluster's Pods over the official Kubernetes client, in process. The admission tables create, dry-run,
    read and patch hundreds of Pods, one after another: a `kubectl` process each cost about 65 ms of CPU, most of a
    module's. What the API server returns to a create is the Pod as admitted and stored, as a `get` after it would
    read it."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api(api)

    def _call(self, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        from proxy_component.live.adopt import status_message

        try:
            response = method(*args, _preload_content=False, **kwargs)
        except ApiException as e:
            raise PodRefusedError(status_message(e)) from None
        loaded: dict[str, Any] = json.loads(response.data)
        return loaded

    def create(self, pod: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """The Pod as the API server admitted it (stored, or only run through admission with `dry_run`)."""
        namespace = pod["metadata"].get("namespace") or "default"
        options = {"dry_run": "All"} if dry_run else {}  # kubectl's default field validation: Strict
        return self._call(self._core.create_namespaced_pod, namespace, pod, field_validation="Strict", **options)

    def get(self, name: str, namespace: str) -> dict[str, Any]:
        return self._call(self._core.read_namespaced_pod, name, namespace)

    def patch_ephemeral_containers(self, name: str, namespace: str, patch: list[Any]) -> dict[str, Any]:
        """A JSON patch of `pods/ephemeralcontainers` (`kubectl debug`'s way); the Pod after it."""
        return self._call(
            self._core.patch_namespaced_pod_ephemeralcontainers, name, namespace, patch, field_validation="Strict"
        )
