"""`import proxy_component` without any cloud SDK: it succeeds and loads none, nor the Pulumi SDK or the Kubernetes
client (what keeps a command's start fast: its time is measured in bench/bench_component.py, not here); discovery
says what to install."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

CLOUD_SDKS = ("pulumi_aws", "pulumi_gcp", "pulumi_azure_native")

# Makes the cloud SDKs uninstalled for the interpreter it runs in, as a sitecustomize would.
BLOCK_SDKS = f"""
import importlib.abc, sys
class _NoCloudSdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {CLOUD_SDKS!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NoCloudSdk())
"""

MEASURE = """
import json
import proxy_component
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pulumi", "kubernetes", "grpc", "cryptography"))
import proxy_component.component
import proxy_component.discovery
from proxy_component.discovery import aks, eks, gke
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {sdks!r})
print(json.dumps({{"heavy": heavy, "loaded": loaded, "discovery": [aks.__name__, eks.__name__, gke.__name__]}}))
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_import_without_cloud_sdks_succeeds_and_loads_none_nor_pulumi_or_the_kubernetes_client() -> None:
    done = _run(BLOCK_SDKS + MEASURE.format(sdks=CLOUD_SDKS))
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["loaded"] == []
    # The command's modules (settings, render, the CLI) load lazily what they need beyond pydantic and yaml.
    assert run["heavy"] == []
    assert run["discovery"] == [
        "proxy_component.discovery.aks",
        "proxy_component.discovery.eks",
        "proxy_component.discovery.gke",
    ]


def test_the_blocker_really_blocks() -> None:
    done = _run(BLOCK_SDKS + "import pulumi_aws.eks")
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'pulumi_aws'" in done.stderr


@pytest.mark.parametrize(
    ("call", "package", "extra"),
    [
        ("eks.from_existing('prod')", "pulumi_aws", "aws"),
        ("gke.from_existing('prod', 'europe-west1')", "pulumi_gcp", "gcp"),
        ("aks.from_existing('prod', 'rg-prod')", "pulumi_azure_native", "azure"),
        ("aks.http_proxy_config({}, http_proxy='http://proxy.corp:3128')", "pulumi_azure_native", "azure"),
    ],
)
def test_discovery_without_its_sdk_names_the_extra_to_install(call: str, package: str, extra: str) -> None:
    code = BLOCK_SDKS + f"from proxy_component.discovery import aks, eks, gke\n{call}\n"
    done = _run(code)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"ImportError: {package} is not installed (No module named '{package}'); "
        f"cloud discovery needs it: pip install 'proxy-component[{extra}]'"
    )
