"""Cluster API: the systemd drop-ins (checked by systemd itself), the kubeadm fragment, and the static-pod choice."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from proxy_component.render.capi import (
    CONTAINERD_DROPIN,
    KUBELET_DROPIN,
    kubeadm_config_spec,
    kubeadm_config_template_patch,
    kubeadm_control_plane_patch,
    systemd_dropin,
    systemd_proxy_secret,
)
from proxy_component.render.env import ProxyValues
from proxy_component.settings import Settings, parse_settings
from tests.conftest import SEEDS
from tests.pki import make_ca, make_leaf

SEED_001 = (SEEDS / "001_4279155272499de0.txt").read_text()
CAPI: dict[str, object] = {
    "cluster": {"name": "mycluster", "podCidrs": ["100.64.0.0/13"], "serviceCidrs": ["100.96.0.0/11"]},
    "proxy": {"httpProxy": "http://myProxyUser:mySuperSecretPassword@192.168.52.220:3128"},
    "capi": {"enabled": True, "namespace": "org-giantswarm"},
}
VALUES = ProxyValues("http://proxy.corp:3128", "http://proxy.corp:3128", "localhost,127.0.0.1,.svc,10.0.0.0/8")


def _settings(proxy: dict[str, object] | None = None, **capi: object) -> Settings:
    data = yaml.safe_load(yaml.safe_dump(CAPI))
    data["capi"].update(capi)
    if proxy is not None:
        data["proxy"] = proxy
    return parse_settings(data)


def test_dropin_follows_the_seed_template_line_for_line() -> None:
    block = SEED_001.split("```bash\n", 1)[1].split("```", 1)[0]
    template = block.replace("{{ .HttpProxy }}", "H").replace("{{ .HttpsProxy }}", "S").replace("{{ .NoProxy }}", "N")
    assert systemd_dropin(ProxyValues("H", "S", "N")) == template


def test_dropin_escapes_what_systemd_would_otherwise_interpret() -> None:
    dropin = systemd_dropin(ProxyValues('http://u:p%40ss"x\\@proxy:3128', "h", "n"))
    assert 'Environment="HTTP_PROXY=http://u:p%%40ss\\"x\\\\@proxy:3128"' in dropin


@pytest.mark.parametrize("unit", ["containerd", "kubelet"])
def test_systemd_accepts_each_dropin(tmp_path: Path, unit: str) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is needed: apt-get install systemd")
    service = tmp_path / f"{unit}.service"
    service.write_text("[Unit]\nDefaultDependencies=no\n[Service]\nType=oneshot\nExecStart=/usr/bin/true\n")
    dropins = tmp_path / f"{unit}.service.d"
    dropins.mkdir()
    settings = _settings()
    secret = systemd_proxy_secret(
        settings, systemd_dropin(ProxyValues("http://u:p%40ss@proxy:3128", "http://p:3128", "a,b"))
    )
    key = {"containerd": "containerdProxy", "kubelet": "kubeletProxy"}[unit]
    (dropins / "http-proxy.conf").write_text(secret["stringData"][key])
    result = subprocess.run([analyze, "verify", str(service)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "http-proxy.conf" not in result.stderr, result.stderr
    # A drop-in that systemd would misread must be caught by the same check.
    (dropins / "http-proxy.conf").write_text('[Service]\nEnvironment="HTTP_PROXY=http://u:p%40ss@proxy:3128"\n')
    bad = subprocess.run([analyze, "verify", str(service)], capture_output=True, text=True, timeout=60, check=False)
    assert "http-proxy.conf" in bad.stderr


def test_systemd_proxy_secret_layout() -> None:
    secret = systemd_proxy_secret(_settings(), "DROPIN")
    assert secret["metadata"]["name"] == "mycluster-systemd-proxy"
    assert secret["metadata"]["namespace"] == "org-giantswarm"
    assert secret["stringData"] == {"containerdProxy": "DROPIN", "kubeletProxy": "DROPIN"}
    assert secret["kind"] == "Secret"


def test_kubeadm_files_match_the_seed() -> None:
    spec = kubeadm_config_spec(_settings())
    # Seed 001: path, permissions "0600", contentFrom.secret {name: <clusterName>-systemd-proxy, key: containerdProxy}.
    assert spec["files"] == [
        {
            "path": CONTAINERD_DROPIN,
            "owner": "root:root",
            "permissions": "0600",
            "contentFrom": {"secret": {"name": "mycluster-systemd-proxy", "key": "containerdProxy"}},
        },
        {
            "path": KUBELET_DROPIN,
            "owner": "root:root",
            "permissions": "0600",
            "contentFrom": {"secret": {"name": "mycluster-systemd-proxy", "key": "kubeletProxy"}},
        },
    ]
    assert "path: /etc/systemd/system/containerd.service.d/http-proxy.conf" in SEED_001
    assert 'permissions: "0600"' in SEED_001
    assert spec["preKubeadmCommands"] == ["systemctl daemon-reload", "systemctl restart containerd"]


def test_static_pods_get_no_proxy_by_default() -> None:
    spec = kubeadm_config_spec(_settings(), VALUES)
    assert not any("export" in c or "proxy" in c.lower() for c in spec["preKubeadmCommands"])


def test_exporting_to_kubeadm_carries_the_complete_no_proxy() -> None:
    spec = kubeadm_config_spec(_settings({"httpProxy": "http://proxy.corp:3128"}, exportToKubeadm=True), VALUES)
    exports = [c for c in spec["preKubeadmCommands"] if c.startswith("export ")]
    assert [shlex.split(c)[1].split("=", 1)[0] for c in exports] == [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
    ]
    assert shlex.split(exports[4])[1] == f"NO_PROXY={VALUES.no_proxy}"
    with pytest.raises(ValueError, match="needs the node proxy values"):
        kubeadm_config_spec(_settings({"httpProxy": "http://proxy.corp:3128"}, exportToKubeadm=True))


def test_control_plane_and_worker_templates_carry_the_fragment() -> None:
    settings = _settings()
    spec = kubeadm_config_spec(settings)
    kcp = kubeadm_control_plane_patch(settings, spec)
    kct = kubeadm_config_template_patch(settings, spec)
    assert kcp["spec"]["kubeadmConfigSpec"] is spec
    assert kct["spec"]["template"]["spec"] is spec
    assert (kcp["kind"], kcp["metadata"]["name"]) == ("KubeadmControlPlane", "mycluster-control-plane")
    assert (kct["kind"], kct["metadata"]["name"]) == ("KubeadmConfigTemplate", "mycluster-md-0")


def test_capi_needs_a_proxy_nodes_can_reach() -> None:
    from proxy_component.settings import SettingsError

    with pytest.raises(SettingsError, match=r"proxy\.nodeHttpProxy: required when capi\.enabled"):
        parse_settings({"cluster": {"name": "c"}, "capi": {"enabled": True}})
    upstream = parse_settings(
        {
            "cluster": {"name": "c"},
            "capi": {"enabled": True},
            "proxy": {"upstream": {"url": "http://proxy.corp:3128", "username": "svc", "password": "p:w#x"}},
        }
    )
    assert upstream.node_http_proxy == "http://svc:p%3Aw%23x@proxy.corp:3128"
    assert upstream.nodes_have_credentials


SEED_002 = (SEEDS / "002_64844312cf5b41e1.txt").read_text()
TKG = ProxyValues(
    "http://asdf", "https://asdf2", ".svc.cluster.local,.svc,localhost,127.0.0.1,100.64.0.0/13,100.96.0.0/11"
)


@pytest.mark.parametrize(("addon", "key"), [("vsphere-cpi", "vsphereCPI"), ("vsphere-csi", "vsphereCSI")])
def test_tkg_vsphere_addon_values_match_the_seed(addon: str, key: str) -> None:
    from proxy_component.render.capi import tkg_addon_values

    seed_block = SEED_002.split("  values.yaml: |\n", 2)[1 if key == "vsphereCPI" else 2].split("type: tkg", 1)[0]
    seed_text = "\n".join(line[4:] for line in seed_block.splitlines()) + "\n"
    assert tkg_addon_values(addon, TKG) == seed_text


def test_tkg_kapp_controller_values_carry_the_seeds_config_keys() -> None:
    from proxy_component.render.capi import tkg_addon_values

    values = yaml.safe_load(tkg_addon_values("kapp-controller", TKG))
    assert values == {
        "kappController": {
            "config": {"httpProxy": "http://asdf", "httpsProxy": "https://asdf2", "noProxy": TKG.no_proxy}
        }
    }
    assert "        httpProxy: http://asdf\n        httpsProxy: https://asdf2\n" in SEED_002


def test_tkg_addon_secrets_follow_the_seed_metadata() -> None:
    from proxy_component.render.capi import tkg_addon_secrets

    secrets = tkg_addon_secrets(_settings(), {"vsphere-cpi": "a", "vsphere-csi": "b", "kapp-controller": "c"})
    cpi = secrets[0]
    assert cpi["type"] == "tkg.tanzu.vmware.com/addon"
    assert cpi["metadata"]["annotations"] == {"tkg.tanzu.vmware.com/addon-type": "cloud-provider/vsphere-cpi"}
    assert cpi["metadata"]["labels"]["tkg.tanzu.vmware.com/addon-name"] == "vsphere-cpi"
    assert cpi["metadata"]["labels"]["tkg.tanzu.vmware.com/cluster-name"] == "mycluster"
    assert secrets[1]["metadata"]["annotations"] == {"tkg.tanzu.vmware.com/addon-type": "csi/vsphere-csi"}
    assert [s["stringData"]["values.yaml"] for s in secrets] == ["a", "b", "c"]


def test_cluster_values_follow_seed_001() -> None:
    from proxy_component.render.capi import cluster_values_yaml

    values = yaml.safe_load(cluster_values_yaml(ProxyValues("http://p:3128", "http://p:3128", "cluster.local,svc")))
    assert values == {
        "cluster": {"proxy": {"http": "http://p:3128", "https": "http://p:3128", "noProxy": "cluster.local,svc"}},
        # cluster-apps-operator's env list (read by charts with a top-level env, e.g. external-dns-app), both cases.
        "env": [
            {"name": "HTTP_PROXY", "value": "http://p:3128"},
            {"name": "http_proxy", "value": "http://p:3128"},
            {"name": "HTTPS_PROXY", "value": "http://p:3128"},
            {"name": "https_proxy", "value": "http://p:3128"},
            {"name": "NO_PROXY", "value": "cluster.local,svc"},
            {"name": "no_proxy", "value": "cluster.local,svc"},
        ],
    }
    assert "cluster:\n  proxy:\n    http: " in SEED_001


# --- the upstream's CA on the machines (proxy.upstream.trustedCa) ----------------------------------------------

UPSTREAM = {"url": "http://proxy.corp:3128"}


def _with_ca(*cas: str) -> Settings:
    return _settings({"upstream": {**UPSTREAM, "trustedCa": list(cas)}})


def test_without_trusted_ca_the_capi_output_is_what_it_was() -> None:
    settings = _settings({"upstream": UPSTREAM})
    assert settings.trusted_ca is None
    assert systemd_proxy_secret(settings, "DROPIN")["stringData"] == {
        "containerdProxy": "DROPIN",
        "kubeletProxy": "DROPIN",
    }
    spec = kubeadm_config_spec(settings)
    assert [f["path"] for f in spec["files"]] == [CONTAINERD_DROPIN, KUBELET_DROPIN]
    assert spec["preKubeadmCommands"] == ["systemctl daemon-reload", "systemctl restart containerd"]


def test_each_ca_is_a_file_of_the_local_store_from_the_systemd_proxy_secret() -> None:
    from proxy_component.render.capi import CA_DIR, CA_UNIT

    first, second = make_ca("Corp Inspecting CA"), make_ca("Corp Second CA")
    settings = _with_ca(first.cert_pem, second.cert_pem)
    secret = systemd_proxy_secret(settings, "DROPIN")
    spec = kubeadm_config_spec(settings)
    extra = spec["files"][2:]
    assert [(f["path"], f["permissions"], f["contentFrom"]["secret"]) for f in extra] == [
        (f"{CA_DIR}/proxy-component-upstream-1.crt", "0644", {"name": "mycluster-systemd-proxy", "key": "upstreamCa1"}),
        (f"{CA_DIR}/proxy-component-upstream-2.crt", "0644", {"name": "mycluster-systemd-proxy", "key": "upstreamCa2"}),
        (CA_UNIT, "0644", {"name": "mycluster-systemd-proxy", "key": "caUnit"}),
    ]
    assert sorted(secret["stringData"]) == ["caUnit", "containerdProxy", "kubeletProxy", "upstreamCa1", "upstreamCa2"]
    assert {secret["stringData"]["upstreamCa1"], secret["stringData"]["upstreamCa2"]} == {
        first.cert_pem,
        second.cert_pem,
    }
    # The store is updated (by the unit) before containerd is restarted; kubeadm starts kubelet after all of them.
    assert spec["preKubeadmCommands"] == [
        "systemctl daemon-reload",
        "systemctl enable --now proxy-component-ca.service",
        "systemctl restart containerd",
    ]


def test_systemd_accepts_the_ca_unit_ordered_before_containerd_and_kubelet(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is needed: apt-get install systemd")
    for name in ("containerd", "kubelet"):
        (tmp_path / f"{name}.service").write_text(
            "[Unit]\nDefaultDependencies=no\n[Service]\nType=oneshot\nExecStart=/usr/bin/true\n"
        )
    text = systemd_proxy_secret(_with_ca(make_ca().cert_pem), "DROPIN")["stringData"]["caUnit"]
    unit = tmp_path / "proxy-component-ca.service"
    unit.write_text(text)
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "proxy-component-ca" not in result.stderr, result.stderr
    assert "Before=containerd.service kubelet.service\n" in text
    assert "WantedBy=multi-user.target containerd.service kubelet.service\n" in text
    # The same check catches a unit systemd would misread (an unescaped specifier in ExecStart).
    unit.write_text(text.replace("exec update-ca-certificates", "exec update-ca-certificates %Q"))
    bad = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert "proxy-component-ca" in bad.stderr


def _exec_start(unit: str) -> list[str]:
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    # systemd's unquoting for this unit: one double-quoted argument with \\ \" %% $$ escapes.
    argv = shlex.split(line.removeprefix("ExecStart="))
    return [a.replace("%%", "%").replace("$$", "$") for a in argv]


def test_in_a_scratch_root_the_ca_lands_in_the_named_path_and_the_store_update_trusts_it(tmp_path: Path) -> None:
    """The files as cloud-init writes them, then the unit's ExecStart, in a mount namespace of the test's own where
    the local store, /etc/ssl/certs (a copy) and the update hooks are scratch directories: Debian's real
    update-ca-certificates runs and its bundle must hold the CA (openssl verifies a leaf against it)."""
    from proxy_component.render.capi import CA_DIR, CA_UNIT

    if shutil.which("update-ca-certificates") is None or shutil.which("unshare") is None:
        pytest.fail("update-ca-certificates and unshare are needed: apt-get install ca-certificates util-linux")
    ca = make_ca("Corp Inspecting CA")
    settings = _with_ca(ca.cert_pem)
    data = systemd_proxy_secret(settings, "DROPIN")["stringData"]
    local, certs, hooks = tmp_path / "local", tmp_path / "certs", tmp_path / "hooks"
    local.mkdir()
    hooks.mkdir()
    subprocess.run(["cp", "-a", "/etc/ssl/certs", str(certs)], check=True)
    unit = ""
    for entry in kubeadm_config_spec(settings)["files"][2:]:
        content = data[entry["contentFrom"]["secret"]["key"]]
        if entry["path"] == CA_UNIT:
            unit = content
            continue
        assert entry["path"].startswith(f"{CA_DIR}/")
        (local / entry["path"].removeprefix(f"{CA_DIR}/")).write_text(content)
    before = Path("/etc/ssl/certs/ca-certificates.crt").read_text()
    mounts = " && ".join(
        f"mount --bind {shlex.quote(str(src))} {dst}"
        for src, dst in ((local, CA_DIR), (certs, "/etc/ssl/certs"), (hooks, "/etc/ca-certificates/update.d"))
    )
    script = f"{mounts} && exec {shlex.join(_exec_start(unit))}"
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 added" in result.stdout, result.stdout
    assert os.readlink(certs / "proxy-component-upstream-1.pem") == f"{CA_DIR}/proxy-component-upstream-1.crt"
    bundle = (certs / "ca-certificates.crt").read_text()
    assert ca.cert_pem in bundle
    leaf = make_leaf(ca, "registry.example")
    (tmp_path / "leaf.pem").write_text(leaf.cert_pem)
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(certs / "ca-certificates.crt"),
                             str(tmp_path / "leaf.pem")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert Path("/etc/ssl/certs/ca-certificates.crt").read_text() == before, "the real store is untouched"
    assert ca.cert_pem not in before
