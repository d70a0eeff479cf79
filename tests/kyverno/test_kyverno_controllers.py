"""Kyverno's own controllers, not its CLI: the admission controller (cmd/kyverno) and the background controller
(cmd/background-controller) of Kyverno v1.19.1, built from its Go module by scripts/kyverno, run out of cluster
against the test cluster's real kube-apiserver (scripts/cluster, v1.36.3), every server of theirs on 127.0.0.1.

Out of cluster is Kyverno's development mode: with `--serverIP` the admission controller signs its serving
certificate for that address (pkg/tls/keypair.go) and registers its webhooks by URL, `https://<serverIP><path>`
(newClientConfig, pkg/controllers/webhook/utils.go), instead of by Service; `--serverIP=127.0.0.1:<port>` carries the
port. Kyverno's own CRDs of that version (config/crds) are installed, and an empty Kyverno ConfigMap (Kyverno's
defaults, none of the Helm chart's resource filters: the policies' own exclusions are what keeps kube-system and the
excluded namespaces out).

The rendered MutatingPolicy then mutates, through the API server's call to Kyverno's webhook, every Pod of the shared
table (tests/fixtures/injection-cases.yaml) created with kubectl, exactly as the stack transform renders it (env and
mounts in order), and the ephemeral containers `kubectl debug` adds (the branch the Kyverno CLI cannot reach); the
GeneratingPolicies, run by the background controller, clone `proxy-config` and `proxy-trust` into namespaces that
exist (`generateExisting`) and into a new one, and keep the clones in step with the source (`synchronize`).

On every supported version: the default one, and each older one (tests/kwok_cluster.py OLDER, 1.36 and 1.35,
`pytest -m older`), the policies rendered for that cluster (`cluster.kubernetesVersion: "1.36"` or `"1.35"` there).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.render import plain_values
from proxy_component.render.env import proxy_config_object
from proxy_component.render.kyverno import CLONE_CONFIG_NAME, CLONE_TRUST_NAME, POLICY_NAME, kyverno_objects
from proxy_component.render.trust import trust_bundle_object
from proxy_component.settings import Settings
from tests.injection_cases import (
    cases,
    container_parts,
    ephemeral_cases,
    ephemeral_transformed,
    injected_parts,
    namespaces,
    profiles,
    stamp,
    transformed,
)
from tests.kwok_cluster import VERSIONS, PodRefusedError, Pods, kwok_cluster, minor, settings_version

from .test_kyverno_cli import kyverno_settings

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
NAMESPACE = "kyverno"
CA_SECRET = "kyverno-svc.kyverno.svc.kyverno-tls-ca"
TLS_SECRET = "kyverno-svc.kyverno.svc.kyverno-tls-pair"
RESOURCE_WEBHOOKS = "kyverno-resource-mutating-webhook-cfg"
# Kyverno's CRDs, as its install manifests group them (config/crds of the module).
CRD_DIRS = ("kyverno", "policies.kyverno.io", "reports", "policyreport")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(condition: Callable[[], bool], what: str, timeout: float = 120, why: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{why()}")
        time.sleep(0.5)


@dataclass
class Controller:
    """A Kyverno controller process of ours, its log in a file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return f"\n--- {self.name} (last {lines} lines of {self.log}) ---\n" + "\n".join(text[-lines:])

    def alive(self) -> None:
        assert self.process.poll() is None, f"{self.name} exited with {self.process.returncode}{self.tail()}"

    def stop(self) -> None:
        """SIGTERM to our own process (Kyverno shuts down on it), SIGKILL after 30 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


class KyvernoCluster:
    def __init__(self, kubeconfig: Path, workdir: Path, port: int, version: str | None) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.port = port
        self.settings_version = settings_version(version)  # cluster.kubernetesVersion: unset, or '1.36', '1.35'
        self.controllers: list[Controller] = []
        self.pods = Pods(kubeconfig)  # the tables' Pods, in process

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.workdir / "kube-cache"), *args],
            input=stdin, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert not check or result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}{self.tails()}"
        return result

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, objects: list[Obj]) -> None:
        """Server-side: the trust bundle is larger than client-side apply's last-applied annotation allows."""
        self.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def established(self) -> bool:
        """Every CRD established (`kubectl wait` fails outright on a CRD that has no conditions yet)."""
        crds = self.get("crd")["items"]
        return bool(crds) and all(
            any(
                c["type"] == "Established" and c["status"] == "True"
                for c in crd.get("status", {}).get("conditions") or []
            )
            for crd in crds
        )

    def tails(self) -> str:
        return "".join(c.tail() for c in self.controllers)

    def start(self, name: str, binary: Path, *args: str) -> Controller:
        """A controller out of cluster: the environment its Deployment gives it, our kubeconfig, every server of
        it on 127.0.0.1 (metrics on a port of ours, controller-runtime's metrics off)."""
        env = {
            **os.environ,
            "KYVERNO_NAMESPACE": NAMESPACE,
            "KYVERNO_SERVICEACCOUNT_NAME": name,
            "KYVERNO_DEPLOYMENT": name,
            "KYVERNO_POD_NAME": f"{name}-out-of-cluster",
            "KYVERNO_SVC": "kyverno-svc",
            "INIT_CONFIG": "kyverno",
            "METRICS_CONFIG": "kyverno-metrics",
        }
        log = self.workdir / f"{name}.log"
        command = [
            str(binary), f"--kubeconfig={self.kubeconfig}", "--metricsHost=127.0.0.1", f"--metricsPort={_free_port()}",
            "--controllerRuntimeMetricsAddress=0", "--loggingFormat=text", "--disableLogColor", "--v=2", *args,
        ]  # fmt: skip
        with log.open("wb") as out:
            process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir)
        controller = Controller(name, process, log)
        self.controllers.append(controller)
        return controller

    def ca(self) -> str | None:
        """The CA the admission controller made (its Secret), PEM; None before it exists."""
        out = self.kubectl("get", "secret", CA_SECRET, "-n", NAMESPACE, "-o", "json", check=False)
        if out.returncode != 0:
            return None
        return base64.b64decode(json.loads(out.stdout)["data"]["tls.crt"]).decode()

    def ready(self) -> bool:
        """Kyverno's readiness endpoint answers 200 over TLS verified with its own CA for 127.0.0.1, as the API
        server will call it."""
        ca = self.ca()
        if ca is None:
            return False
        context = ssl.create_default_context(cadata=ca)
        try:
            # No proxy from the environment: the server is ours, on loopback.
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
            )
            with opener.open(f"https://127.0.0.1:{self.port}/health/readiness", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def _listening(pid: int) -> list[str]:
    """The local addresses the process `pid` listens on (TCP)."""
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]


@pytest.fixture(scope="module", params=VERSIONS)
def live(
    request: pytest.FixtureRequest, kyverno_controllers: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KyvernoCluster]:
    version: str | None = request.param
    admission, background = kyverno_controllers
    crds = admission.parent / "crds"
    workdir = tmp_path_factory.mktemp("kyverno-controllers")
    name = "pc-kyverno" if version is None else f"pc-kyverno-{minor(version)}"
    with kwok_cluster(workdir, name, 1, version=version) as kubeconfig:
        cluster = KyvernoCluster(kubeconfig, workdir, _free_port(), version)
        yield from _controllers(cluster, admission, background, crds)
    for controller in cluster.controllers:  # stopped by SIGTERM, not killed
        assert controller.process.returncode == 0, f"{controller.name}: {controller.process.returncode}"


def _controllers(cluster: KyvernoCluster, admission: Path, background: Path, crds: Path) -> Iterator[KyvernoCluster]:
    """Kyverno's CRDs, its ConfigMap and its two controllers on the cluster, stopped when the module is done."""
    try:
        started = time.monotonic()
        for namespace in [NAMESPACE, *namespaces()]:
            if namespace != "kube-system":
                cluster.kubectl("create", "namespace", namespace)
        for part in CRD_DIRS:  # server-side: the policies' CRDs are larger than client-side apply's annotation allows
            cluster.kubectl("apply", "--server-side", "-f", str(crds / part))
        _wait(cluster.established, "Kyverno's CRDs established")
        # Kyverno's ConfigMap, empty: its defaults and no resource filters. Without it Kyverno creates no
        # UpdateRequest, so generates nothing: its updateRequestThreshold is then 0, not the default 1000
        # (pkg/config/config.go: only a loaded ConfigMap sets it; pkg/utils/generator/updaterequests.go).
        cluster.kubectl("create", "configmap", "kyverno", "-n", NAMESPACE)
        cluster.start(
            "kyverno-admission-controller", admission,
            f"--serverIP=127.0.0.1:{cluster.port}", "--webhookServerHost=127.0.0.1",
            f"--webhookServerPort={cluster.port}", f"--caSecretName={CA_SECRET}", f"--tlsSecretName={TLS_SECRET}",
            "--admissionReports=false", "--autoUpdateWebhooks=true",
            "--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller",
        )  # fmt: skip
        cluster.start("kyverno-background-controller", background)

        def serving() -> bool:
            for controller in cluster.controllers:
                controller.alive()
            return cluster.ready()

        _wait(serving, "the admission controller's webhook server ready", timeout=300, why=cluster.tails)
        print(f"Kyverno controllers out of cluster: ready {time.monotonic() - started:.0f}s after the cluster was up")
        for controller in cluster.controllers:
            addresses = _listening(controller.process.pid)
            assert all(a.startswith("127.0.0.1:") for a in addresses), (controller.name, addresses)
        assert f"127.0.0.1:{cluster.port}" in _listening(cluster.controllers[0].process.pid)
        yield cluster
    finally:
        for controller in cluster.controllers:
            controller.stop()


def _probe_pod() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "team-a"},
        "spec": {"automountServiceAccountToken": False, "containers": [{"name": "app", "image": "app"}]},
    }


def _apply_mutating_policy(live: KyvernoCluster, settings: Settings) -> None:
    """Apply the MutatingPolicy of `settings` and wait until Kyverno's webhook, registered by URL, gives a Pod what
    the transform gives it (a server-side dry run goes through admission; Kyverno's webhooks allow it)."""
    policy = next(o for o in kyverno_objects(settings, plain_values(settings)) if o["kind"] == "MutatingPolicy")
    live.apply([policy])
    wanted = transformed(settings, _probe_pod())["spec"]["containers"][0]["env"]
    seen: list[str] = [""]

    def in_force() -> bool:
        try:
            admitted = live.pods.create(_probe_pod(), dry_run=True)
        except PodRefusedError as e:
            seen[0] = str(e)[:600]
            return False
        env = admitted["spec"]["containers"][0].get("env") or []
        seen[0] = json.dumps(env)[:600]
        return bool(env == wanted)

    _wait(in_force, "the MutatingPolicy in force", timeout=180, why=lambda: f" (last: {seen[0]}){live.tails()}")
    hooks = live.get("mutatingwebhookconfiguration", RESOURCE_WEBHOOKS)["webhooks"]
    urls = [h["clientConfig"].get("url", "") for h in hooks]
    mine = [u for u in urls if u.startswith(f"https://127.0.0.1:{live.port}/mpol/") and POLICY_NAME in u]
    assert mine, urls
    assert all("service" not in h["clientConfig"] for h in hooks), hooks
    ca = live.ca()
    assert ca is not None
    assert all(base64.b64decode(h["clientConfig"]["caBundle"]).decode() == ca for h in hooks)


def _delete_pods(live: KyvernoCluster) -> None:
    for namespace in namespaces():
        live.kubectl("delete", "pods", "-n", namespace, "-l", "table=injection", "--wait=false")


@pytest.mark.parametrize("profile", profiles())
def test_kyvernos_admission_controller_gives_every_pod_of_the_table_what_the_transform_gives(
    live: KyvernoCluster, profile: str
) -> None:
    settings = kyverno_settings(profile, "MutatingPolicy", live.settings_version)
    _apply_mutating_policy(live, settings)
    untouched = 0
    for case in cases():
        pod = case.pod(f"kyv-{profile}-{case.name}")
        pod["metadata"]["labels"] = {"table": "injection"}
        admitted = live.pods.create(pod)
        expected = transformed(settings, pod)
        assert injected_parts(admitted["spec"]) == injected_parts(expected["spec"]), (profile, case.name)
        assert stamp(admitted) == stamp(expected), (profile, case.name)
        untouched += expected == pod
    _delete_pods(live)
    # Both sides of each rule: Pods left alone (opted out, excluded namespaces, kube-system) and Pods changed.
    assert 3 <= untouched < len(cases()), untouched


@pytest.mark.parametrize("profile", profiles())
def test_kyvernos_admission_controller_gives_ephemeral_containers_what_the_transform_gives(
    live: KyvernoCluster, profile: str
) -> None:
    """`kubectl debug`'s way, one UPDATE of `pods/ephemeralcontainers` per container: the MutatingPolicy's
    subresource branch, which the Kyverno CLI cannot reach, run by Kyverno itself; the ones added before stay as
    they were."""
    settings = kyverno_settings(profile, "MutatingPolicy", live.settings_version)
    _apply_mutating_policy(live, settings)
    by_name = {case.name: case for case in cases()}
    changed = untouched = 0
    for eph in ephemeral_cases():
        case = by_name[eph.pod]
        pod = case.pod(f"kyv-eph-{profile}-{eph.name}")
        pod["metadata"]["labels"] = {"table": "injection"}
        name = pod["metadata"]["name"]
        admitted = live.pods.create(pod)
        expected: list[Obj] = []
        for container in eph.containers:
            # A JSON patch appends it, keeping the order (a strategic merge patch puts the new one first).
            path = "/spec/ephemeralContainers" + ("/-" if expected else "")
            patch = [{"op": "add", "path": path, "value": container if expected else [container]}]
            patched = live.pods.patch_ephemeral_containers(name, case.namespace, patch)
            expected += ephemeral_transformed(settings, admitted, [container])
            got = container_parts(patched["spec"]["ephemeralContainers"])
            wanted = container_parts(expected)
            assert got == wanted, (profile, eph.name, json.dumps(got), json.dumps(wanted))
            changed += expected[-1] != container
            untouched += expected[-1] == container
        after = live.pods.get(name, case.namespace)
        assert injected_parts(after["spec"]) == injected_parts(admitted["spec"])
        assert stamp(after) == stamp(admitted), "an ephemeral container changes no stamp"
    _delete_pods(live)
    assert changed >= 4, (changed, untouched)
    assert untouched >= 2, (changed, untouched)


def _data(live: KyvernoCluster, kind: str, namespace: str, name: str) -> dict[str, str] | None:
    out = live.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    if out.returncode != 0:
        return None
    data: dict[str, str] = json.loads(out.stdout).get("data") or {}
    return data


@pytest.mark.parametrize(
    ("profile", "policy", "source"),
    [("credentials", CLONE_CONFIG_NAME, "proxy-config"), ("trust", CLONE_TRUST_NAME, "proxy-trust")],
)
def test_kyvernos_background_controller_clones_the_source_into_every_namespace_and_keeps_it_in_step(
    live: KyvernoCluster, profile: str, policy: str, source: str
) -> None:
    """The GeneratingPolicy: into a namespace that existed before it (`generateExisting`), into a namespace created
    after it (the admission controller's webhook hands it to the background controller), the change of the source
    carried to every clone (`synchronize`); never into an excluded namespace nor one where the component manages the
    object itself."""
    settings = kyverno_settings(profile, "MutatingPolicy", live.settings_version)
    home = settings.deployment.namespace
    values = plain_values(settings)
    origin = (
        proxy_config_object(settings, home, values) if source == "proxy-config" else trust_bundle_object(settings, home)
    )
    kind = origin["kind"].lower()
    live.apply([origin])
    want = _data(live, kind, home, source)
    assert want
    generating = next(o for o in kyverno_objects(settings, values) if o["metadata"]["name"] == policy)
    live.apply([generating])
    fresh = f"fresh-{profile}"
    try:
        _wait(lambda: _data(live, kind, "default", source) == want, f"the clone of {source} in default",
              why=live.tails)  # fmt: skip
        live.kubectl("create", "namespace", fresh)
        _wait(lambda: _data(live, kind, fresh, source) == want, f"the clone of {source} in {fresh}", why=live.tails)
        # The source changes (a key added): every clone follows.
        field = "stringData" if kind == "secret" else "data"
        live.kubectl(
            "patch", kind, source, "-n", home, "--type=merge", "-p", json.dumps({field: {"synchronized": "yes"}})
        )
        again = _data(live, kind, home, source)
        assert again
        assert again != want
        for namespace in ("default", fresh):

            def follows(namespace: str = namespace) -> bool:
                return _data(live, kind, namespace, source) == again

            _wait(follows, f"the clone in {namespace} following the source", why=live.tails)
        # Left alone: an excluded namespace, and a listed one (the component writes the object there itself).
        for namespace in ("legacy", "team-a"):
            assert _data(live, kind, namespace, source) is None, namespace
    finally:
        live.kubectl("delete", "generatingpolicy", policy, "--ignore-not-found")
        live.kubectl("delete", "namespace", fresh, "--ignore-not-found", "--wait=false")
        with contextlib.suppress(AssertionError):
            live.kubectl("delete", kind, source, "-n", home)
