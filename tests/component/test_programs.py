"""The root stack program and the example programs, run unchanged under Pulumi mocks."""

from __future__ import annotations

import base64
import json
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime.config import set_all_config

from proxy_component import SettingsError
from proxy_component.stack import stop_quietly
from tests.component import test_discovery_aks as aks_tests
from tests.component import test_discovery_eks as eks_tests
from tests.component import test_discovery_gke as gke_tests
from tests.component.test_discovery_support import CONFIG_MAP, answering
from tests.conftest import ROOT, Harness

PROVIDER = "pulumi:providers:kubernetes"


@pytest.fixture
def in_dir() -> Iterator[None]:
    """Run a program here: its working directory, config and SIGINT handler (the stack's) are put back after."""
    before = os.getcwd()
    interrupt = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        os.chdir(before)
        set_all_config({})
        signal.signal(signal.SIGINT, interrupt)


def _stack_config(path: Path) -> dict[str, str]:
    config = yaml.safe_load(path.read_text())["config"]
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def _exports(harness: Harness) -> dict[str, Any]:
    from pulumi.runtime.settings import get_root_resource

    stack: Any = get_root_resource()
    return {k: harness.value(pulumi.Output.from_input(v)) for k, v in stack.outputs.items()}


def test_dev_stack_renders_the_example_cluster_to_a_directory(mocked: Harness, in_dir: None) -> None:
    set_all_config(_stack_config(ROOT / "Pulumi.dev.yaml"))
    os.chdir(ROOT)
    runpy.run_path(str(ROOT / "__main__.py"))
    assert signal.getsignal(signal.SIGINT) is stop_quietly, "the engine's SIGINT ends the program without a trace"
    registered = mocked.settle()
    (provider,) = [r for r in registered if r.typ == PROVIDER]
    assert provider.inputs["renderYamlToDirectory"] == "rendered/dev"
    children = [r for r in registered if r.typ.startswith("kubernetes:")]
    assert len(children) == 4
    assert all(r.provider is not None and "::cluster::" in r.provider for r in children)
    cli = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "no-proxy", "examples/ipv6-only/proxy.yaml"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    exports = _exports(mocked)
    assert exports["noProxy"] == cli.stdout.strip()
    assert exports["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"


def test_an_unknown_stack_config_key_is_an_error(mocked: Harness, in_dir: None) -> None:
    set_all_config({"proxy-component:clustr": "{}", "proxy-component:cluster": '{"podCidrs": ["10.0.0.0/16"]}'})
    from proxy_component.stack import settings_from_config

    with pytest.raises(SettingsError, match=r"proxy-component:clustr: unknown stack config key \(accepted: "):
        settings_from_config()


def test_stack_config_errors_name_the_field(mocked: Harness, in_dir: None) -> None:
    set_all_config({"proxy-component:cluster": '{"podCidrs": ["10.0.0.0/99"]}'})
    from proxy_component.stack import settings_from_config

    with pytest.raises(SettingsError, match=r"cluster\.podCidrs\[0\]: '10\.0\.0\.0/99' is not a CIDR"):
        settings_from_config()


def test_ipv6_only_example_program(mocked: Harness, in_dir: None) -> None:
    runpy.run_path(str(ROOT / "examples/ipv6-only/__main__.py"))
    names = sorted(r.name for r in mocked.settle())
    assert names == [
        "ipv6-only",
        "ipv6-only-proxy-config-default",
        "ipv6-only-service",
        "ipv6-only-tinyproxy",
        "ipv6-only-tinyproxy-config",
    ]


def test_existing_program_example_uses_its_own_provider(mocked: Harness, in_dir: None) -> None:
    pulumi.runtime.set_mocks(mocked.mocks, project="existing-program", stack="prod", preview=False)
    set_all_config({"existing-program:kubeconfig": "apiVersion: v1\nkind: Config\n"}, ["existing-program:kubeconfig"])
    runpy.run_path(str(ROOT / "examples/existing-program/__main__.py"))
    registered = mocked.settle()
    kube = [r for r in registered if r.typ.startswith("kubernetes:")]
    assert {r.typ for r in kube} >= {"kubernetes:apps/v1:DaemonSet", "kubernetes:apps/v1:Deployment"}
    assert all(r.provider is not None and "::cluster::" in r.provider for r in kube)
    conf = next(r for r in kube if r.name == "egress-tinyproxy-config").inputs["data"]["tinyproxy.conf"]
    assert "Upstream http proxy.corp.example:3128\n" in conf
    assert "svc:" not in conf
    assert "@" not in conf


def test_embedded_default_is_the_ipv6_only_example() -> None:
    embedded = (ROOT / "proxy_component/data/example.yaml").read_text()
    assert embedded == (ROOT / "examples/ipv6-only/proxy.yaml").read_text()


# --- cloud discovery: the eks, gke and aks examples, and stacks that discover their cluster ------


def _proxy_config_no_proxy(harness: Harness) -> str:
    (config,) = [r for r in harness.of_type(CONFIG_MAP) if r.name == "egress-proxy-config-default"]
    no_proxy: str = config.inputs["data"]["NO_PROXY"]
    return no_proxy


def _kubernetes_children_use(harness: Harness, provider: str) -> None:
    kube = [r for r in harness.settle() if r.typ.startswith("kubernetes:")]
    assert len(kube) == 4
    assert all(r.provider is not None and f"::{provider}::" in r.provider for r in kube)


def test_eks_example_creates_a_cluster_and_feeds_the_proxy_from_it(mocked: Harness, in_dir: None) -> None:
    pulumi.runtime.set_mocks(mocked.mocks, project="eks-egress", stack="prod", preview=False)
    set_all_config({"eks-egress:subnetIds": '["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]'})
    mocked.mocks.state[eks_tests.CLUSTER] = eks_tests.cluster_state("eu-west-1")
    answering(mocked, {eks_tests.GET_VPC: eks_tests.vpc("eu-west-1", ["10.0.0.0/16", "100.64.0.0/16"])})
    runpy.run_path(str(ROOT / "examples/eks/__main__.py"))
    assert _proxy_config_no_proxy(mocked) == (
        "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        "172.20.0.0/16,10.0.0.0/16,100.64.0.0/16,0a1b2c3d4e5f60718293a4b5c6d7e8f9.gr7.eu-west-1.eks.amazonaws.com,"
        "eu-west-1.compute.internal,.eu-west-1.compute.internal,169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254"
    )
    _kubernetes_children_use(mocked, "eks")
    (provider,) = mocked.of_type(PROVIDER)
    kubeconfig = json.loads(provider.inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == eks_tests.cluster_state("eu-west-1")["endpoint"]
    assert {r.name for r in mocked.of_type("aws:eks/nodeGroup:NodeGroup")} == {"nodes"}


def test_eks_example_reads_an_existing_cluster_by_name(mocked: Harness, in_dir: None) -> None:
    pulumi.runtime.set_mocks(mocked.mocks, project="eks-egress", stack="prod", preview=False)
    set_all_config({"eks-egress:clusterName": "prod"})
    answering(
        mocked,
        {
            eks_tests.GET_CLUSTER: eks_tests.get_cluster("us-east-1"),
            eks_tests.GET_VPC: eks_tests.vpc("us-east-1", ["10.0.0.0/16"]),
        },
    )
    runpy.run_path(str(ROOT / "examples/eks/__main__.py"))
    assert _proxy_config_no_proxy(mocked).endswith(
        ",ec2.internal,.ec2.internal,169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254"
    )
    assert not mocked.of_type("aws:eks/cluster:Cluster")
    assert [args for token, args in mocked.mocks.invoked if token == eks_tests.GET_CLUSTER] == [{"name": "prod"}] * 2


def test_gke_example_creates_a_cluster_and_feeds_the_proxy_from_it(mocked: Harness, in_dir: None) -> None:
    pulumi.runtime.set_mocks(mocked.mocks, project="gke-egress", stack="prod", preview=False)
    mocked.mocks.state[gke_tests.CLUSTER] = gke_tests.cluster_state(location="europe-west1-b")
    answering(mocked, {gke_tests.GET_SUBNETWORK: gke_tests.subnetwork()})
    runpy.run_path(str(ROOT / "examples/gke/__main__.py"))
    assert _proxy_config_no_proxy(mocked) == (
        "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        "34.118.224.0/20,10.8.0.0/14,10.132.0.0/20,34.140.21.87,metadata,metadata.google.internal,169.254.169.254"
    )
    _kubernetes_children_use(mocked, "gke")
    (cluster,) = mocked.of_type(gke_tests.CLUSTER)
    assert cluster.inputs["location"] == "europe-west1-b"


def test_aks_example_gives_aks_and_the_pods_the_same_no_proxy(mocked: Harness, in_dir: None) -> None:
    pulumi.runtime.set_mocks(mocked.mocks, project="aks-egress", stack="prod", preview=False)
    set_all_config({"aks-egress:corporateProxy": "http://proxy.corp.example:3128"})
    mocked.mocks.state[aks_tests.CLUSTER] = aks_tests.cluster_state(
        "azure", pools=[aks_tests.pool("system", "snet-aks-nodes")]
    )
    kubeconfig = base64.b64encode(b"apiVersion: v1\nkind: Config\n").decode()
    answering(
        mocked,
        {
            aks_tests.GET_SUBNET: aks_tests.get_subnet,
            "azure-native:containerservice:listManagedClusterUserCredentials": {
                "kubeconfigs": [{"name": "clusterUser", "value": kubeconfig}]
            },
        },
    )
    runpy.run_path(str(ROOT / "examples/aks/__main__.py"))
    head = "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
    assert _proxy_config_no_proxy(mocked) == (
        f"{head}10.0.0.10,10.0.0.0/16,10.240.0.0/16,{aks_tests.FQDN},168.63.129.16,169.254.169.254"
    )
    (cluster,) = mocked.of_type(aks_tests.CLUSTER)
    own = cluster.inputs["httpProxyConfig"]
    assert own["httpProxy"] == own["httpsProxy"] == "http://proxy.corp.example:3128"
    # AKS adds its API server FQDN to its effective noProxy itself; everything else is the same list.
    assert ",".join(own["noProxy"]) == f"{head}10.0.0.0/16,10.240.0.0/16,168.63.129.16,169.254.169.254"
    _kubernetes_children_use(mocked, "aks")


STACKS = ROOT / "examples/stack-per-cluster"


READ_STACK = "pulumi:pulumi:readStackOutputs"


def _run_stack(harness: Harness, stack: str) -> dict[str, Any]:
    """A cluster stack of the example, its installation stack's output as `pulumi up` of Pulumi.installation.yaml
    exports it (the settings it holds); the read of it checked, then left out of `invoked`."""
    installation = {
        k.split(":", 1)[1]: v
        for k, v in yaml.safe_load((STACKS / "Pulumi.installation.yaml").read_text())["config"].items()
        if k != "proxy-component:layer"
    }
    harness.mocks.calls[READ_STACK] = {"name": "x", "outputs": {"installation": installation}}
    pulumi.runtime.set_mocks(harness.mocks, project="proxy-component", stack=stack, preview=False)
    set_all_config(_stack_config(STACKS / f"Pulumi.{stack}.yaml"))
    runpy.run_path(str(STACKS / "__main__.py"))
    exports = _exports(harness)
    read = harness.mocks.invoked.pop(0)
    assert read == (READ_STACK, {"name": "organization/proxy-component/installation"})
    return exports


def test_stack_discovers_an_existing_eks_cluster_by_name(mocked: Harness, in_dir: None) -> None:
    answering(
        mocked,
        {
            eks_tests.GET_CLUSTER: eks_tests.get_cluster("eu-west-1"),
            eks_tests.GET_VPC: eks_tests.vpc("eu-west-1", ["10.0.0.0/16"]),
        },
    )
    exports = _run_stack(mocked, "eks-prod")
    assert exports["noProxy"] == (
        "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        "172.20.0.0/16,10.0.0.0/16,0a1b2c3d4e5f60718293a4b5c6d7e8f9.gr7.eu-west-1.eks.amazonaws.com,"
        "eu-west-1.compute.internal,.eu-west-1.compute.internal,169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254,"
        "corp.example,.corp.example"
    )
    assert mocked.mocks.invoked == [
        (eks_tests.GET_CLUSTER, {"name": "prod", "region": "eu-west-1"}),
        (eks_tests.GET_VPC, {"id": eks_tests.VPC_ID, "region": "eu-west-1"}),
    ]
    (provider,) = mocked.of_type(PROVIDER)
    assert provider.inputs["context"] == "eks-prod"
    names = sorted(r.name for r in mocked.settle() if r.typ.startswith("kubernetes:"))
    assert names == [
        "eks-prod-proxy-config-apps",
        "eks-prod-proxy-config-default",
        "eks-prod-service",
        "eks-prod-tinyproxy",
        "eks-prod-tinyproxy-config",
    ]


def test_stack_discovers_an_existing_gke_cluster_by_name_and_location(mocked: Harness, in_dir: None) -> None:
    answering(
        mocked, {gke_tests.GET_CLUSTER: gke_tests.get_cluster(), gke_tests.GET_SUBNETWORK: gke_tests.subnetwork()}
    )
    exports = _run_stack(mocked, "gke-prod")
    assert exports["noProxy"] == (
        "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        "34.118.224.0/20,10.8.0.0/14,10.132.0.0/20,34.140.21.87,metadata,metadata.google.internal,169.254.169.254,"
        "corp.example,.corp.example"
    )
    assert mocked.mocks.invoked[0] == (gke_tests.GET_CLUSTER, {"name": "prod", "location": "europe-west1"})


def test_stack_discovers_an_existing_aks_cluster_and_applies_the_override(mocked: Harness, in_dir: None) -> None:
    found = aks_tests.cluster_state("kubenet", pods=["10.244.0.0/16"], services=["10.2.0.0/16"])
    answering(mocked, {aks_tests.GET_CLUSTER: found})
    exports = _run_stack(mocked, "aks-prod")
    assert exports["noProxy"] == (
        "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        f"10.0.0.0/16,10.244.0.0/16,10.224.0.0/16,{aks_tests.FQDN},168.63.129.16,169.254.169.254,"
        "corp.example,.corp.example"
    )
    assert mocked.mocks.invoked == [
        (aks_tests.GET_CLUSTER, {"resourceGroupName": "rg-prod", "resourceName": "prod-aks"})
    ]
    conf = next(r for r in mocked.of_type(CONFIG_MAP) if r.name == "aks-prod-tinyproxy-config")
    allow = [line for line in conf.inputs["data"]["tinyproxy.conf"].splitlines() if line.startswith("Allow ")]
    assert allow == ["Allow 10.224.0.0/16", "Allow 10.244.0.0/16", "Allow 127.0.0.1", "Allow ::1"]


@pytest.mark.parametrize(
    ("discover", "problems"),
    [
        (
            {"cloud": "aws2", "name": "prod"},
            ["proxy-component:discover.cloud: 'aws2' is not a cloud (expected aws, gcp or azure)"],
        ),
        (
            {"cloud": "gcp", "name": "prod", "region": "europe-west1"},
            [
                "proxy-component:discover.region: unknown key for cloud gcp (accepted: cloud, location, name, override, project)",
                "proxy-component:discover.location: required for cloud gcp",
            ],
        ),
        (
            {"cloud": "azure", "name": "", "resourceGroup": "rg", "override": {"serviceCidr": ["10.0.0.0/16"]}},
            [
                "proxy-component:discover.name: '' is not a non-empty string",
                "proxy-component:discover.override.serviceCidr: unknown key (accepted: apiServerHosts, apiServerIps, "
                "cloudEntries, ipFamily, nodeCidrs, podCidrs, serviceCidrs)",
            ],
        ),
        ("prod", ["proxy-component:discover: 'prod' is not an object (expected e.g. {cloud: aws, name: prod})"]),
    ],
)
def test_discover_config_errors_name_the_key(discover: Any, problems: list[str]) -> None:
    from proxy_component.stack import discover_from_config

    with pytest.raises(SettingsError) as raised:
        discover_from_config(discover)
    assert raised.value.problems == problems


def test_every_settings_key_can_come_from_stack_config(mocked: Harness, in_dir: None) -> None:
    set_all_config(
        {
            "proxy-component:cluster": '{"name": "c1", "podCidrs": ["10.0.0.0/16"]}',
            "proxy-component:proxy": '{"httpProxy": "http://proxy.corp:3128"}',
            "proxy-component:injection": '{"kyverno": true}',
            "proxy-component:capi": '{"enabled": true}',
            "proxy-component:helmValuesSecrets": '[{"profile": "cert-manager", "namespace": "flux-system"}]',
        }
    )
    from proxy_component.stack import settings_from_config

    settings = settings_from_config()
    assert settings.injection.kyverno
    assert settings.capi.enabled
    assert settings.helm_values_secrets[0].profile == "cert-manager"


def test_the_stack_program_ends_quietly_when_the_engine_stops_it() -> None:
    """A failed step makes the language host send SIGINT, twice when the program is slow to go: before, Python
    printed KeyboardInterrupt tracebacks. The stack's handler exits at once with the host's "already reported" code
    (tests/engine/test_repair.py shows it under the engine)."""
    program = (
        "import os, signal, threading, time\n"
        "from proxy_component.stack import stop_quietly\n"
        "signal.signal(signal.SIGINT, stop_quietly)\n"
        "print('waiting', flush=True)\n"
        "threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "time.sleep(30)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (result.returncode, result.stdout, result.stderr) == (32, "waiting\n", "")
