"""certifi's `cacert.pem` changed on the rendering machine (something appended its own CA, as this project's CI
machine once saw): the merged `proxy-trust` bundle would carry the extra root into every pod, and the render would
depend on the machine. `render` warns, naming the field and the file, and the bundle's annotation says so.

Run in a child process whose `sys.path` starts with a copy of the installed certifi and its dist-info (RECORD),
so that the test changes only that copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import certifi
import yaml

from tests.pki import make_ca

SETTINGS = {
    "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
    "namespaces": ["default"],
}
UPSTREAM = "http://192.0.2.10:3128"


def _render(tmp_path: Path, site: Path) -> tuple[str, dict[str, str]]:
    ca = make_ca()
    config = tmp_path / "proxy.yaml"
    settings = {**SETTINGS, "proxy": {"upstream": {"url": UPSTREAM, "trustedCa": ca.cert_pem}}}
    config.write_text(yaml.safe_dump(settings))
    code = f"import sys; sys.path.insert(0, {str(site)!r}); from proxy_component.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "render", str(config), "--format", "manifests"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    trust = next(
        o
        for o in yaml.safe_load_all(done.stdout)
        if o and o["kind"] == "ConfigMap" and o["metadata"]["name"] == "proxy-trust"
    )
    return done.stderr, trust["metadata"]["annotations"]


def _copy_certifi(site: Path) -> Path:
    installed = Path(certifi.__file__).parent
    shutil.copytree(installed, site / "certifi")
    [info] = installed.parent.glob("certifi-*.dist-info")
    shutil.copytree(info, site / info.name)
    return site / "certifi" / "cacert.pem"


def test_a_changed_certifi_is_warned_of_and_annotated(tmp_path: Path) -> None:
    site = tmp_path / "site"
    pem = _copy_certifi(site)
    stderr, annotations = _render(tmp_path, site)
    assert "warning" not in stderr, stderr
    assert annotations["proxy-component.io/public-roots"].startswith(f"certifi {certifi.__version__}")
    assert "changed" not in annotations["proxy-component.io/public-roots"]

    pem.write_text(pem.read_text() + make_ca().cert_pem)  # what this machine's CI once did to certifi
    stderr, annotations = _render(tmp_path, site)
    assert "proxy-component: warning: proxy.upstream.trustedCa: the merged proxy-trust bundle" in stderr
    assert str(pem.resolve()) in stderr
    assert "pip install --force-reinstall --no-deps certifi" in stderr
    assert "(changed on the machine that rendered it)" in annotations["proxy-component.io/public-roots"]
