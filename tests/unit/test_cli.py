"""The proxy-component command: render, no-proxy, explain; invalid input exits 2 and writes nothing."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from proxy_component.cli import main
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples/ipv6-only/proxy.yaml"


def test_render_emits_a_yaml_stream_of_the_proxy_and_the_consumers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLE)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs] == [
        ("ConfigMap", "kube-system", "http-proxy-config"),
        ("DaemonSet", "kube-system", "http-proxy"),
        ("Service", "kube-system", "http-proxy"),
        ("ConfigMap", "default", "proxy-config"),
    ]
    assert docs[3]["data"]["HTTPS_PROXY"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"


def test_render_without_config_uses_the_embedded_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render"]) == 0
    embedded = capsys.readouterr()
    assert "using the embedded example" in embedded.err
    assert main(["render", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == embedded.out


def test_render_to_a_directory_writes_one_file_per_object(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["render", str(EXAMPLE), "-o", str(out)]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "000-configmap-kube-system-http-proxy-config.yaml",
        "001-daemonset-kube-system-http-proxy.yaml",
        "002-service-kube-system-http-proxy.yaml",
        "003-configmap-default-proxy-config.yaml",
    ]
    for name in files:
        assert len(list(yaml.safe_load_all((out / name).read_text()))) == 1


def test_invalid_input_exits_2_with_the_message_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {podCidrs: [10.0.0.0/8, 10.0.0.1/33]}\nnamespaces: [default]\n")
    out = tmp_path / "out"
    assert main(["render", str(bad), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        "cluster.podCidrs[1]: '10.0.0.1/33' is not a CIDR (expected e.g. 10.0.0.0/16 or fd00:10::/56)" in captured.err
    )
    assert not out.exists()
    assert main(["no-proxy", str(bad)]) == 2


ALLOW_ONLY_LOOPBACK = (
    "cluster.podCidrs: [] and cluster.nodeCidrs: [] leave tinyproxy's Allow with only loopback, so it would refuse "
    "every pod (expected at least one pod or node CIDR, deployment.allowedSourceCidrs, or a discovered network)"
)


def test_render_answers_the_seven_mistake_file_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Every field error and every check across fields (the settings' and the plan's) at once, in a fixed order."""
    errors = ROOT / "tests/unit/settings_errors"
    assert main(["render", str(errors / "seven_mistakes.yaml")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    header, *lines = captured.err.splitlines()
    assert header == "proxy-component: invalid settings:"
    expected = (errors / "seven_mistakes.expected").read_text().splitlines()
    assert [line.strip() for line in lines] == [*expected, ALLOW_ONLY_LOOPBACK]
    assert "S3CRET" not in captured.err
    assert main(["render", str(errors / "seven_mistakes.yaml")]) == 2
    assert capsys.readouterr().err == captured.err


def test_render_reports_the_allow_list_beside_a_field_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("deployment: {port: eighty}\nnamespaces: [default]\n")
    assert main(["render", str(bad)]) == 2
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()[1:]]
    assert lines == ["deployment.port: 'eighty': Input should be a valid integer", ALLOW_ONLY_LOOPBACK]


def test_no_proxy_prints_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-proxy", str(EXAMPLE)]) == 0
    line = capsys.readouterr().out
    assert line.endswith("\n")
    assert line.count("\n") == 1
    seed = ".k8s.internal,.svc,localhost,127.0.0.1,10.0.0.0/8,fd00::/8"
    assert set(seed.split(",")) <= set(line.strip().split(","))


def test_explain_lists_origins_renderings_the_table_and_each_warning(capsys: pytest.CaptureFixture[str]) -> None:
    from proxy_component.clients import CLIENT_IDS
    from proxy_component.explain import warnings
    from proxy_component.settings import load_settings

    assert main(["explain", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "covers fd00:10:244::/56 (cluster.podCidrs[0])" in out
    settings = load_settings(str(EXAMPLE))
    no_proxy = settings.no_proxy()
    python = [line for line in out.splitlines() if line.startswith("NO_PROXY_PYTHON")]
    kept = [t for t in str(no_proxy).split(",") if t != "fd00::/8" and not t.startswith("[")]
    assert python == [
        f"NO_PROXY_PYTHON (no_proxy of every workload; NO_PROXY too with the python runtime): {','.join(kept)}"
    ]
    assert "JDK_JAVA_OPTIONS (java runtime): -Dhttp.proxyHost=http-proxy.kube-system.svc.k8s.internal" in out
    assert "not for Java: fd00::/8" in out
    header = out[out.index("┏") : out.index("┡")]
    for client_id in CLIENT_IDS:  # each column header holds the id's parts, one per line
        assert all(part in header for part in client_id.split("-")), client_id
    expected = warnings(settings, no_proxy)
    assert expected, "the IPv6-only example has cells that miss their intent"
    shown = [line for line in out.splitlines() if line.startswith("[")]
    assert shown == [f"[{n}] {line}" for n, line in enumerate(expected, 1)]
    # The default injection gives no_proxy the Python-safe list: no cell is an error any more.
    assert not any("InvalidURL" in line for line in shown)
    assert any("select the java runtime" in line for line in shown)


def test_explain_json_has_one_cell_per_destination_and_client(capsys: pytest.CaptureFixture[str]) -> None:
    from proxy_component.clients import CLIENT_IDS
    from proxy_component.explain import destinations, evaluate
    from proxy_component.settings import load_settings

    assert main(["explain", str(EXAMPLE), "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)
    settings = load_settings(str(EXAMPLE))
    urls = [d.url for d in destinations(settings, settings.no_proxy())]
    assert [(c["url"], c["client"]) for c in cells] == [(u, c) for u in urls for c in CLIENT_IDS]
    assert all(set(c) == {"url", "client", "decision", "intended", "warning"} for c in cells)
    assert all((c["warning"] == "") == (c["decision"] == c["intended"]) for c in cells)
    assert cells == [c.as_dict() for c in evaluate(settings, settings.no_proxy())]
    assert {c["decision"] for c in cells} == {"bypass", "proxy"}, "no client raises with the default injection"


def test_explain_json_with_urls_judges_exactly_those(capsys: pytest.CaptureFixture[str]) -> None:
    from proxy_component.clients import CLIENT_IDS

    urls = ["http://my-svc.default/", "http://github.com/", "http://[fd00:10:244::5]:8080/", "http://api.other.test/"]
    assert main(["explain", str(EXAMPLE), "--json", *(a for u in urls for a in ("--url", u))]) == 0
    cells = json.loads(capsys.readouterr().out)
    assert [(c["url"], c["client"]) for c in cells] == [(u, c) for u in urls for c in CLIENT_IDS]
    by = {(c["url"], c["client"]): c for c in cells}
    short = by[("http://my-svc.default/", "go")]
    assert (short["decision"], short["intended"]) == ("proxy", "bypass")
    assert "<name>.<namespace>.svc" in short["warning"]
    assert {by[("http://github.com/", c)]["intended"] for c in CLIENT_IDS} == {"proxy"}
    assert by[("http://[fd00:10:244::5]:8080/", "go")] == {
        "url": "http://[fd00:10:244::5]:8080/",
        "client": "go",
        "decision": "bypass",
        "intended": "bypass",
        "warning": "",
    }
    assert by[("http://api.other.test/", "curl")]["intended"] == "proxy"


@pytest.mark.parametrize("url", ["ftp://x/", "github.com", "http://x:99999/"])
def test_explain_refuses_a_url_it_cannot_judge(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(EXAMPLE), "--json", "--url", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"--url: {url!r}" in captured.err


def test_explain_redacts_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("proxy: {httpProxy: 'http://user:hunter2@proxy.corp:3128'}\ncluster: {podCidrs: [10.0.0.0/16]}\n")
    assert main(["explain", str(config)]) == 0
    out = capsys.readouterr().out
    assert "http://***@proxy.corp:3128" in out
    assert "hunter2" not in out


def test_render_is_byte_identical_for_any_order_of_the_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["namespaces"] = ["default", "apps", "monitoring"]
    data["proxy"]["noProxy"] = ["fd00::/8", "registry.corp", ".corp.example", "172.16.0.0/12"]
    outputs = set()
    rng = random.Random(11)
    for i in range(5):
        for key in ("podCidrs", "nodeCidrs"):
            rng.shuffle(data["cluster"][key])
        rng.shuffle(data["proxy"]["noProxy"])
        rng.shuffle(data["namespaces"])
        path = tmp_path / f"c{i}.yaml"
        path.write_text(yaml.safe_dump(data))
        assert main(["render", str(path)]) == 0
        outputs.add(capsys.readouterr().out)
    assert len(outputs) == 1


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "proxy-component"
    result = subprocess.run([str(script), "no-proxy", str(EXAMPLE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("localhost,127.0.0.1,::1,[::1],k8s.internal,.k8s.internal,svc,.svc,")


CAPI_CONFIG = """\
cluster: {name: mycluster, podCidrs: [100.64.0.0/13], serviceCidrs: [100.96.0.0/11]}
proxy: {httpProxy: "http://proxy.corp:3128"}
capi: {enabled: true, namespace: org-giantswarm}
injection: {kyverno: true}
"""


@pytest.mark.parametrize(
    ("fmt", "kinds"),
    [
        (["capi"], ["Secret", "Secret"]),
        (["capi-patches"], ["KubeadmControlPlane", "KubeadmConfigTemplate"]),
        (["kyverno"], ["MutatingPolicy"]),
        (["manifests"], ["ConfigMap", "DaemonSet", "Service", "MutatingPolicy"]),
        (["kustomize-patch", "--target-name", "web"], ["Kustomization"]),
    ],
)
def test_render_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: list[str], kinds: list[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CAPI_CONFIG)
    assert main(["render", str(config), "--format", *fmt]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == kinds


def test_render_helm_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CAPI_CONFIG)
    assert main(["render", str(config), "--format", "helm-values", "tkg-kapp-controller"]) == 0
    values = yaml.safe_load(capsys.readouterr().out)
    assert values["kappController"]["config"]["httpProxy"] == "http://proxy.corp:3128"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "helm"], "--format: 'helm' is not a format (expected one of: manifests, helm-values, capi"),
        (["--format", "helm-values"], "--format helm-values: no profile is not a profile (expected one of: argo-cd"),
        (["--format", "kustomize-patch"], "--format kustomize-patch: --target-name is required"),
        (["--format", "capi", "extra"], "--format capi: takes no argument, got 'extra'"),
    ],
)
def test_bad_formats_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["render", str(EXAMPLE), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_capi_format_needs_capi_enabled(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLE), "--format", "capi"]) == 2
    assert "capi.enabled: false (expected true to render the Cluster API objects)" in capsys.readouterr().err


def test_colliding_object_names_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "cluster: {podCidrs: [10.244.0.0/16]}\n"
        "helmValuesSecrets: [{profile: proxy, namespace: kube-system, name: http-proxy-config},"
        " {profile: env, namespace: kube-system, name: http-proxy-config}]\n"
    )
    assert main(["render", str(config)]) == 2
    assert "Secret kube-system/http-proxy-config: two objects would have this name" in capsys.readouterr().err


def test_output_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / "file"
    existing.write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        main(["render", str(EXAMPLE), "-o", str(existing)])
    assert exit_info.value.code == 2
    assert f"-o {existing}: exists and is not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["render", str(EXAMPLE), "--format", "helm-values", "env", "-o", str(tmp_path / "d")])
    assert "writes the values to stdout" in capsys.readouterr().err


def test_a_config_that_is_not_utf8_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes("cluster: {name: caf\xe9}\n".encode("latin-1"))
    assert main(["no-proxy", str(config)]) == 2
    assert f"{config}: not UTF-8 text" in capsys.readouterr().err


def test_render_to_a_directory_leaves_exactly_the_current_render(tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text(CAPI_CONFIG)
    assert main(["render", str(config), "-o", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    assert any("mutatingpolicy" in name for name in before)
    config.write_text(CAPI_CONFIG.replace("injection: {kyverno: true}\n", ""))
    assert main(["render", str(config), "-o", str(out)]) == 0
    after = sorted(p.name for p in out.iterdir())
    assert after == [name for name in before if "mutatingpolicy" not in name], "the stale policy file must go"


def test_render_refuses_a_directory_with_files_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.yaml").write_text("kind: Namespace\n")
    assert main(["render", "-o", str(out)]) == 2
    assert "holds 'mine.yaml', which proxy-component did not write" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.yaml"], "nothing is half-written"


def test_capi_patches_say_they_are_patches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CAPI_CONFIG)
    assert main(["render", str(config), "--format", "capi-patches"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Merge patches for your Cluster API cluster, NOT objects to apply")
    assert "replaces them whole" in out
    assert main(["render", str(config), "--format", "capi"]) == 0
    assert "Kubeadm" not in capsys.readouterr().out


def test_explain_says_why_jvms_get_no_proxy_with_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "proxy: {httpProxy: 'http://u:hunter2@proxy.corp:3128'}\ncluster: {podCidrs: [10.244.0.0/16]}\n"
        "runtimes: {java: true}\n"
    )
    assert main(["explain", str(config)]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    assert (
        "JDK_JAVA_OPTIONS (java runtime): not rendered, so JVMs get no proxy: the proxy needs credentials, which "
        "the JVM takes from no system property (it would get 407 Proxy Authentication Required, and the JDK "
        "disables Basic authentication for HTTPS tunnels): give JVMs a proxy without credentials, e.g. the "
        "in-cluster tinyproxy with proxy.upstream holding them"
    ) in out
    assert "JVMs ignore the *_proxy variables, and JDK_JAVA_OPTIONS is not rendered: the proxy needs credentials" in out


def argo_cd_no_proxy(out: str) -> list[str]:
    values = yaml.safe_load(out)
    return str({e["name"]: e["value"] for e in values["server"]["env"]}["NO_PROXY"]).split(",")


def test_render_helm_values_derives_argo_cds_names_from_the_release(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLE), "--format", "helm-values", "argo-cd"]) == 0
    default = argo_cd_no_proxy(capsys.readouterr().out)
    assert main(["render", str(EXAMPLE), "--format", "helm-values", "argo-cd", "--release", "my-release"]) == 0
    mine = argo_cd_no_proxy(capsys.readouterr().out)
    assert "argocd-repo-server" in default
    assert "my-release-argocd-repo-server" not in default
    assert mine[-5:] == [
        "my-release-argocd-commit-server",
        "my-release-argocd-dex-server",
        "my-release-argocd-redis",
        "my-release-argocd-repo-server",
        "my-release-redis-ha-haproxy",
    ]
    assert mine[:-5] == default[:-5]  # the cluster's entries do not change
    assert main(["render", str(EXAMPLE), "--format", "helm-values", "argo-cd", "--release", "argocd"]) == 0
    assert argo_cd_no_proxy(capsys.readouterr().out) == default


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--format", "helm-values", "argo-cd", "--release", "My_Release"],
            "--release: 'My_Release' is not a DNS-1123 label (expected 1-63 of a-z, 0-9 and '-', e.g. kube-system)",
        ),
        (
            ["--format", "helm-values", "argo-cd", "--release", "r" * 54],
            f"--release: '{'r' * 54}' has 54 characters, and Helm refuses release names longer than 53",
        ),
        (
            ["--release", "x"],
            "--release: only for --format helm-values (the chart's release name), not --format manifests",
        ),
        (
            ["--format", "helm-values", "vsphere-cpi"],
            "--format helm-values: 'vsphere-cpi' was renamed 'tkg-vsphere-cpi' in 0.2.0: its values are TKG addon data "
            "values (read by ytt when TKG installs the addon), and a Helm chart named vsphere-cpi accepts them and "
            "does nothing",
        ),
    ],
)
def test_bad_release_names_and_renamed_profiles_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["render", str(EXAMPLE), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_explain_names_a_variable_the_workload_sets_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """--env adds a workload's own variables: the cells they change carry a warning naming them."""
    example = str(ROOT / "examples/corporate-proxy/proxy.yaml")
    urls = ["--url", "http://github.com/", "--url", "http://my-svc.default.svc/"]
    assert main(["explain", example, "--json", *urls]) == 0
    plain = {(c["url"], c["client"]): c for c in json.loads(capsys.readouterr().out)}
    own = ["--env", "REQUEST_METHOD=GET", "--env", "npm_config_no_proxy=example.com"]
    assert main(["explain", example, "--json", *urls, *own]) == 0
    cells = {(c["url"], c["client"]): c for c in json.loads(capsys.readouterr().out)}
    changed = {key: (plain[key]["decision"], cell["decision"]) for key, cell in cells.items() if cell != plain[key]}
    assert changed == {
        ("http://github.com/", "go"): ("proxy", "error"),
        ("http://my-svc.default.svc/", "go"): ("bypass", "error"),  # Go refuses before it reads NO_PROXY
        ("http://my-svc.default.svc/", "node-proxy-from-env-1"): ("bypass", "proxy"),
    }
    assert cells[("http://github.com/", "go")]["warning"].startswith("the workload sets REQUEST_METHOD")
    assert "npm_config_no_proxy" in cells[("http://my-svc.default.svc/", "node-proxy-from-env-1")]["warning"]


def test_explain_refuses_an_env_argument_without_a_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(EXAMPLE), "--json", "--env", "ALL_PROXY"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--env: 'ALL_PROXY' is not NAME=VALUE (expected e.g. ALL_PROXY=http://proxy.corp:3128)" in captured.err


def test_explain_reads_a_trailing_dot_name_as_in_cluster_and_says_what_it_needs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`x.cluster.local.` is the same host as `x.cluster.local`: intended direct. curl and undici 8 bypass it; the
    others keep the dot and proxy it (the real clients agree: test_client_model_real), and the note says what to do.
    With the dotted entry in noProxy only npm still misses it."""
    example = str(ROOT / "examples/corporate-proxy/proxy.yaml")
    url = "http://kubernetes.default.svc.cluster.local./"
    assert main(["explain", example, "--json", "--runtimes", "node,python,java", "--url", url]) == 0
    cells = {c["client"]: c for c in json.loads(capsys.readouterr().out)}
    assert {c["intended"] for c in cells.values()} == {"bypass"}
    assert {k for k, c in cells.items() if c["decision"] == "bypass"} == {"curl", "git", "node-undici"}
    assert {c["warning"] for c in cells.values() if c["decision"] == "proxy"} == {
        f"these clients keep the trailing dot of {url[7:-1]}, which no NO_PROXY entry ends with, so they send it to "
        "the proxy: call in-cluster names without the trailing dot, or add 'cluster.local.' to proxy.noProxy"
    }
    config = tmp_path / "dotted.yaml"
    config.write_text((ROOT / "examples/corporate-proxy/proxy.yaml").read_text())
    settings = yaml.safe_load(config.read_text())
    settings.setdefault("proxy", {}).setdefault("noProxy", []).append("cluster.local.")
    config.write_text(yaml.safe_dump(settings))
    assert main(["explain", str(config), "--json", "--runtimes", "node,python,java", "--url", url]) == 0
    cells = {c["client"]: c for c in json.loads(capsys.readouterr().out)}
    assert {k for k, c in cells.items() if c["decision"] != "bypass"} == {"npm"}
