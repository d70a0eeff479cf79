"""Cluster API: systemd drop-ins for containerd and kubelet, kubeadm files and commands, and value Secrets.

What control-plane static pods receive is a deliberate choice (kubernetes/kubeadm#324):
kubeadm copies every exported `*_proxy` variable of its own environment into
the static pod manifests, and an API server that proxies its calls to
webhooks breaks. So by default the variables are only in the containerd and
kubelet units' drop-ins, which kubeadm does not read, and static pods get no
proxy at all. With `capi.exportToKubeadm`, `preKubeadmCommands` export them
too, always with the complete NO_PROXY, for kubeadm's own downloads
(kubernetes/kubeadm#2765); the static pods then carry that complete list.

With `proxy.upstream.trustedCa` (a TLS-inspecting upstream), the machines
trust its CA before containerd pulls and kubelet starts: each certificate is
a file in `/usr/local/share/ca-certificates/` (Debian and Ubuntu's local
store), and a oneshot unit ordered `Before=containerd.service kubelet.service`
runs `update-ca-certificates`, or on the RHEL family copies the files into
`/etc/pki/ca-trust/source/anchors/` and runs `update-ca-trust extract`. It
runs at every boot, and `preKubeadmCommands` start it before containerd is
restarted. Without trustedCa nothing of this is rendered.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from ..settings import Settings, ca_certificates
from .env import ProxyValues, env_pairs
from .helm import helm_values, values_yaml

__all__ = [
    "CA_DIR",
    "CA_UNIT",
    "CA_UNIT_NAME",
    "CONTAINERD_DROPIN",
    "KUBELET_DROPIN",
    "TKG_ADDONS",
    "cluster_values_secret",
    "cluster_values_yaml",
    "kubeadm_config_spec",
    "kubeadm_config_template_patch",
    "kubeadm_control_plane_patch",
    "node_ca_files",
    "node_ca_unit",
    "systemd_dropin",
    "systemd_proxy_secret",
    "tkg_addon_secrets",
    "tkg_addon_values",
]

Obj = dict[str, Any]

CONTAINERD_DROPIN = "/etc/systemd/system/containerd.service.d/http-proxy.conf"
KUBELET_DROPIN = "/etc/systemd/system/kubelet.service.d/http-proxy.conf"
_KEYS = {CONTAINERD_DROPIN: "containerdProxy", KUBELET_DROPIN: "kubeletProxy"}
CA_DIR = "/usr/local/share/ca-certificates"  # Debian/Ubuntu's local CA store, read by update-ca-certificates
CA_ANCHORS = "/etc/pki/ca-trust/source/anchors"  # the RHEL family's, read by update-ca-trust
CA_UNIT_NAME = "proxy-component-ca.service"
CA_UNIT = f"/etc/systemd/system/{CA_UNIT_NAME}"
_CA_UNIT_KEY = "caUnit"
_CA_FILE = "proxy-component-upstream-{}.crt"
_CA_KEY = "upstreamCa{}"


def node_ca_files(bundle: str) -> dict[str, tuple[str, str]]:
    """Each certificate of a trustedCa bundle: its path on the machine -> (its Secret key, its PEM text).

    One certificate a file, as update-ca-certificates expects.
    """
    return {
        f"{CA_DIR}/{_CA_FILE.format(i)}": (_CA_KEY.format(i), pem) for i, pem in enumerate(ca_certificates(bundle), 1)
    }


def node_ca_unit() -> str:
    """The oneshot unit that puts the CA files into the OS trust store before containerd and kubelet start.

    Debian/Ubuntu: `update-ca-certificates` reads CA_DIR. RHEL family: the files are copied into the anchors
    directory and `update-ca-trust extract` runs. Neither tool: the unit fails, loudly, rather than letting
    containerd start without the CA.
    """
    script = (
        "if command -v update-ca-certificates >/dev/null 2>&1; then exec update-ca-certificates; "
        "elif command -v update-ca-trust >/dev/null 2>&1; then "
        f"mkdir -p {CA_ANCHORS} && cp {CA_DIR}/{_CA_FILE.format('*')} {CA_ANCHORS}/ && exec update-ca-trust extract; "
        "else echo proxy-component-ca: neither update-ca-certificates nor update-ca-trust is installed >&2; exit 1; fi"
    )
    return (
        "\n".join(
            [
                "[Unit]",
                "Description=Trust the upstream proxy's CA (proxy-component)",
                "DefaultDependencies=no",
                "After=local-fs.target",
                "Before=containerd.service kubelet.service",
                "",
                "[Service]",
                "Type=oneshot",
                "RemainAfterExit=yes",
                f"ExecStart=/bin/sh -c {_unit_quote(script)}",
                "",
                "[Install]",
                "WantedBy=multi-user.target containerd.service kubelet.service",
            ]
        )
        + "\n"
    )


def _unit_quote(script: str) -> str:
    """One ExecStart argument in double quotes: `%` and `$` would be systemd specifiers and variables."""
    return '"' + script.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$") + '"'


def _systemd_quote(value: str) -> str:
    """A value inside Environment="..."; `%` starts a specifier in unit files, so it is doubled."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def systemd_dropin(values: ProxyValues) -> str:
    """`[Service]` and one `Environment="NAME=value"` line per variable and spelling (plain strings only)."""
    lines = ["[Service]"]
    lines += [f'Environment="{name}={_systemd_quote(str(value))}"' for name, value in env_pairs(values)]
    return "\n".join(lines) + "\n"


def _cluster_secret(settings: Settings, suffix: str, data: Obj) -> Obj:
    """A Secret `<cluster>-<suffix>` beside the Cluster object in the management cluster."""
    cluster = str(settings.cluster.name)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{cluster}-{suffix}",
            "namespace": settings.capi.namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster, "app.kubernetes.io/part-of": "proxy-component"},
        },
        "type": "Opaque",
        "stringData": data,
    }


def systemd_proxy_secret(settings: Settings, dropin: Any) -> Obj:
    """`<cluster>-systemd-proxy`: the drop-in for containerd (`containerdProxy`) and kubelet (`kubeletProxy`).

    With `proxy.upstream.trustedCa`, also each CA certificate (`upstreamCa1`, ...) and the unit that installs
    them (`caUnit`).
    """
    data: Obj = {"containerdProxy": dropin, "kubeletProxy": dropin}
    if settings.trusted_ca is not None:
        data.update({key: pem for key, pem in node_ca_files(settings.trusted_ca).values()})
        data[_CA_UNIT_KEY] = node_ca_unit()
    return _cluster_secret(settings, "systemd-proxy", data)


def cluster_values_secret(settings: Settings, values_yaml: Any) -> Obj:
    """`<cluster>-cluster-values`: `cluster.proxy.{http,https,noProxy}` and the top-level keys, for the app platform."""
    return _cluster_secret(settings, "cluster-values", {"values": values_yaml})


def kubeadm_config_spec(settings: Settings, node_values: ProxyValues | None = None) -> Obj:
    """The KubeadmConfigSpec fragment: the two drop-ins from the Secret (0600) and the commands that load them.

    `node_values` is needed only with `capi.exportToKubeadm` (plain strings):
    the exports then carry the complete NO_PROXY.
    """
    secret = f"{settings.cluster.name}-systemd-proxy"
    files = [
        {
            "path": path,
            "owner": "root:root",
            "permissions": "0600",
            "contentFrom": {"secret": {"name": secret, "key": key}},
        }
        for path, key in _KEYS.items()
    ]
    commands = ["systemctl daemon-reload", "systemctl restart containerd"]
    if settings.trusted_ca is not None:
        cas = [(path, key) for path, (key, _) in node_ca_files(settings.trusted_ca).items()]
        files += [
            {"path": path, "owner": "root:root", "permissions": "0644",
             "contentFrom": {"secret": {"name": secret, "key": key}}}
            for path, key in [*cas, (CA_UNIT, _CA_UNIT_KEY)]
        ]  # fmt: skip
        # The unit runs the store's update now (and at every boot before containerd and kubelet); containerd,
        # already running, is restarted after it so that its registry clients read the updated store.
        commands = ["systemctl daemon-reload", f"systemctl enable --now {CA_UNIT_NAME}", "systemctl restart containerd"]
    if settings.capi.export_to_kubeadm:
        if node_values is None:
            raise ValueError("kubeadm_config_spec: capi.exportToKubeadm needs the node proxy values")
        commands += [f"export {name}={shlex.quote(str(value))}" for name, value in env_pairs(node_values)]
    return {"files": files, "preKubeadmCommands": commands}


def kubeadm_control_plane_patch(settings: Settings, spec: Obj) -> Obj:
    """A KubeadmControlPlane carrying the fragment, for merging into (or patching) `<cluster>-control-plane`."""
    return {
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": f"{settings.cluster.name}-control-plane", "namespace": settings.capi.namespace},
        "spec": {"kubeadmConfigSpec": spec},
    }


def kubeadm_config_template_patch(settings: Settings, spec: Obj) -> Obj:
    """A KubeadmConfigTemplate carrying the fragment, for the workers' `<cluster>-md-0`."""
    return {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": f"{settings.cluster.name}-md-0", "namespace": settings.capi.namespace},
        "spec": {"template": {"spec": spec}},
    }


_YTT_HEADER = "#@data/values\n#@overlay/match-child-defaults missing_ok=True\n---\n"


def tkg_addon_values(addon: str, values: ProxyValues) -> str:
    """One addon's values.yaml text as TKG writes it (seed 002): ytt data values for CPI and CSI."""
    body = values_yaml(f"tkg-{addon}", values)
    return body if addon == "kapp-controller" else _YTT_HEADER + body


def cluster_values_yaml(values: ProxyValues) -> str:
    """The `<cluster>-cluster-values` content: Giant Swarm's layout (seed 001)."""
    return yaml.safe_dump(helm_values("giantswarm-cluster-values", values), sort_keys=False)


_TKG_ADDONS = (
    ("vsphere-cpi", "cloud-provider/vsphere-cpi"),
    ("vsphere-csi", "csi/vsphere-csi"),
    ("kapp-controller", "addons-management/kapp-controller"),
)
TKG_ADDONS = tuple(addon for addon, _ in _TKG_ADDONS)


def tkg_addon_secrets(settings: Settings, values_yaml: dict[str, Any]) -> list[Obj]:
    """TKG-style addon Secrets (seed 002): `values.yaml` for vSphere CPI, CSI and kapp-controller.

    `values_yaml` maps each addon name to its (rendered) values.yaml text.
    """
    cluster = str(settings.cluster.name)
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{cluster}-{addon}-addon",
                "namespace": settings.capi.namespace,
                "annotations": {"tkg.tanzu.vmware.com/addon-type": addon_type},
                "labels": {
                    "tkg.tanzu.vmware.com/addon-name": addon,
                    "tkg.tanzu.vmware.com/cluster-name": cluster,
                    "app.kubernetes.io/part-of": "proxy-component",
                },
            },
            "type": "tkg.tanzu.vmware.com/addon",
            "stringData": {"values.yaml": values_yaml[addon]},
        }
        for addon, addon_type in _TKG_ADDONS
    ]
