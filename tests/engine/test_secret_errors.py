"""No error of any language carries the upstream password (pytest -m engine): a credentialed upstream from secret
config beside a mistake, in TypeScript (settings in an untyped variable, with and without `pulumi.secret`), Go,
YAML and the Python stack program; `preview` and `up` fail with the field-naming line, and the password is in no
output, no `stack export` and no file the run wrote outside the encrypted stack config.

Before the fix, the provider named the `settings` property in its input errors and the engine printed that
property's value beside each reason: `property settings with value '{map[... url:{&{{http://svc:PASSWORD@...`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import test_languages as languages
from .conftest import Project
from .test_languages import _home, typescript_project, yaml_project

hosts = languages.hosts  # the fixtures, shared with the languages' tests
plugin = languages.plugin

pytestmark = pytest.mark.engine
PASSWORD = "Fl33t-Pa55-0824"
UPSTREAM = f"http://svc:{PASSWORD}@proxy.corp.example:3128"


def _files_with_password(root: Path, allowed: set[Path]) -> list[str]:
    """Every file under root (the project, the state, the Pulumi home) holding the password in clear."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or path in allowed or "node_modules" in path.parts:
            continue
        try:
            if PASSWORD.encode() in path.read_bytes():
                found.append(str(path.relative_to(root)))
        except OSError:
            continue
    return found


def _fails_without_the_password(project: Project, expected: str, allowed: Callable[[], set[Path]] = set) -> str:
    outputs = []
    for command in (("preview",), ("up", "--yes", "--skip-preview")):
        result = project.run(*command, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert expected in output, output
        assert PASSWORD not in output, output
        assert "has a problem: " + expected not in output or "with value" not in output
        assert "Traceback" not in output
        assert "While processing input" not in output
        outputs.append(output)
    assert PASSWORD not in json.dumps(project.export())
    assert _files_with_password(project.dir.parent, allowed()) == []
    return outputs[-1]


@pytest.mark.parametrize("secret", [True, False], ids=["pulumi.secret", "plain"])
def test_typescript_typo_beside_a_credentialed_upstream(
    project_factory: Any, hosts: Path, plugin: Path, secret: bool
) -> None:
    """The reviewer's case: settings built in a variable (tsc checks no key), `proxy.noproxy` for `noProxy`."""
    project = typescript_project(project_factory, hosts, plugin, f"typescript-secret-{secret}")
    source = (project.dir / "index.ts").read_text()
    url = 'pulumi.secret(config.require("upstreamUrl"))' if secret else 'config.require("upstreamUrl")'
    program = source.replace(
        "const egress = new proxy.ClusterProxy(",
        "const config = new pulumi.Config();\n"
        "const settings: any = {\n"
        '    cluster: { name: "ipv6-only", dnsDomain: "k8s.internal", ipFamily: "ipv6",\n'
        '        podCidrs: ["fd00:10:244::/56"], serviceCidrs: ["fd00:10:96::/108"],\n'
        '        nodeCidrs: ["10.0.0.0/8", "fd00:10::/64"], apiServerIps: ["fd00:10:96::1"] },\n'
        f'    proxy: {{ noproxy: [".corp.example"], upstream: {{ url: {url} }} }},\n'
        '    namespaces: ["default"],\n'
        "};\n"
        "const egress = new proxy.ClusterProxy(",
    )
    program = re.sub(r"settings: \{.*?\n    \},\n", "settings,\n", program, count=1, flags=re.S)
    assert "settings,\n" in program
    assert "noproxy" in program
    (project.dir / "index.ts").write_text(program)
    project.init()
    project.run("config", "set", "upstreamUrl", UPSTREAM, *(["--secret"] if secret else []))
    # Plain config is the user's to keep plain: Pulumi writes it into the stack file and the update history's
    # `config` (only there); the error output and the state never carry it.
    history = project.dir.parent / "state/.pulumi/history"
    _fails_without_the_password(
        project,
        "proxy.noproxy: unknown key (accepted: ",
        set if secret else lambda: {project.stack_file, *_config_records(history)},
    )


def _config_records(history: Path) -> set[Path]:
    """The update-history files whose only copy of the password is the plain config they record."""
    records = set()
    for path in history.rglob("*.history.json"):
        data = json.loads(path.read_text())
        assert PASSWORD in json.dumps(data.get("config", {}))
        rest = {k: v for k, v in data.items() if k != "config"}
        assert PASSWORD not in json.dumps(rest), path
        records.add(path)
    return records


def test_go_bad_cidr_beside_a_credentialed_upstream(project_factory: Any, hosts: Path, plugin: Path) -> None:
    project: Project = project_factory("examples/go", "ci", "go-secret")
    project.env["PATH"] = f"{hosts}:{project.env['PATH']}"
    _home(project, hosts)
    project.run("package", "add", str(plugin), timeout=900)
    source = (project.dir / "main.go").read_text()
    source = source.replace('"fd00:10:244::/56"', '"10.0.0.1/33"')
    source = source.replace(
        'Proxy:      &proxycomponent.ProxySettingsArgs{NoProxy: pulumi.ToStringArray([]string{"fd00::/8"})},',
        "Proxy: &proxycomponent.ProxySettingsArgs{\n"
        '\t\t\t\t\tNoProxy:  pulumi.ToStringArray([]string{"fd00::/8"}),\n'
        "\t\t\t\t\tUpstream: &proxycomponent.UpstreamSettingsArgs{Url: upstream},\n"
        "\t\t\t\t},",
    )
    source = source.replace(
        "\t\tegress, err := proxycomponent.NewClusterProxy(",
        '\t\turl, _ := ctx.GetConfig("go-egress:upstreamUrl")\n'
        "\t\tupstream := pulumi.ToSecret(pulumi.String(url)).(pulumi.StringOutput)\n"
        "\t\tegress, err := proxycomponent.NewClusterProxy(",
    )
    assert "pulumi.ToSecret" in source
    assert "Url: upstream" in source
    assert "10.0.0.1/33" in source
    (project.dir / "main.go").write_text(source)
    project.init()
    project.run("config", "set", "--secret", "upstreamUrl", UPSTREAM)
    _fails_without_the_password(project, "cluster.podCidrs[0]: '10.0.0.1/33' is not a CIDR")


def test_yaml_bad_cidr_beside_a_credentialed_upstream(project_factory: Any, hosts: Path, plugin: Path) -> None:
    project = yaml_project(project_factory, hosts, plugin, "yaml-secret")
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    program["config"] = {"upstreamUrl": {"type": "string", "secret": True}}
    settings = program["resources"]["proxy"]["properties"]["settings"]
    settings["proxy"]["upstream"] = {"url": "${upstreamUrl}"}
    settings["cluster"]["podCidrs"] = ["10.0.0.1/33"]
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
    project.run("config", "set", "--secret", "upstreamUrl", UPSTREAM)
    _fails_without_the_password(project, "cluster.podCidrs[0]: '10.0.0.1/33' is not a CIDR")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("cluster", {"podCidrs": ["10.0.0.1/33"]}, "cluster.podCidrs[0]: '10.0.0.1/33' is not a CIDR"),
        ("deployment", {"replica": 2}, "deployment.replica: unknown key (accepted: "),
    ],
)
def test_the_stack_program_with_a_credentialed_upstream(
    project_factory: Any, key: str, value: Any, expected: str
) -> None:
    project: Project = project_factory(".", "dev", f"stack-secret-{key}")
    project.init()
    project.config(f"proxy-component:{key}", value)
    project.config("proxy-component:namespaces", ["default"])
    project.run("config", "set", "--secret", "--path", "proxy-component:proxy.upstream.url", UPSTREAM)
    assert PASSWORD not in project.stack_file.read_text()
    _fails_without_the_password(project, expected)


def test_a_bad_cidr_computed_at_run_time_fails_like_a_literal(project_factory: Any, hosts: Path, plugin: Path) -> None:
    """A network input that is an Output (a pod CIDR computed from config), beside a credentialed upstream: the
    literal's one line, under the input's name, not `Unexpected <class 'Exception'>: While processing input`."""
    project = typescript_project(project_factory, hosts, plugin, "typescript-output-cidr")
    source = (project.dir / "index.ts").read_text()
    program = source.replace(
        "const egress = new proxy.ClusterProxy(",
        "const config = new pulumi.Config();\n"
        'const podCidr = pulumi.output(config.require("podCidr")).apply(c => c.trim());\n'
        "const egress = new proxy.ClusterProxy(",
    )
    program = program.replace(
        '        proxy: { noProxy: ["fd00::/8"] },',
        '        proxy: { noProxy: ["fd00::/8"], upstream: { url: config.requireSecret("upstreamUrl") } },',
    )
    program = program.replace(
        "    },\n}, { providers: [cluster] });", "    },\n    podCidrs: [podCidr],\n}, { providers: [cluster] });"
    )
    assert "podCidrs: [podCidr]" in program
    assert "requireSecret" in program
    (project.dir / "index.ts").write_text(program)
    project.init()
    project.run("config", "set", "podCidr", " 10.0.0.1/33 ")
    project.run("config", "set", "--secret", "upstreamUrl", UPSTREAM)
    output = _fails_without_the_password(project, "network inputs.podCidrs[0]: '10.0.0.1/33' is not a CIDR")
    assert "a host name" not in output


@pytest.mark.parametrize(
    ("secret", "transform", "expected"),
    [
        (
            UPSTREAM,
            'u => u.replace("://", "//")',
            "proxy.upstream.url: '***@proxy.corp.example:3128' does not begin with http:// (expected http://host:port",
        ),
        (
            base64.b64encode(PASSWORD.encode()).decode(),
            'b => `http://svc:${Buffer.from(b, "base64").toString()}proxy.corp.example:3128`',
            "proxy.upstream.url: 'http://***' has a port that is not a number from 1 to 65535",
        ),
    ],
    ids=["url-without-its-colon", "decoded-password-without-its-at"],
)
def test_typescript_secret_transformed_with_apply_then_mistyped(
    project_factory: Any, hosts: Path, plugin: Path, secret: str, transform: str, expected: str
) -> None:
    """A secret from config made into the URL with `apply` (a replace; a base64 password decoded into a template)
    with a typo on the way: the engine masks only the secret's exact value, never what a program makes of it, so
    only the component's own masking keeps the password out of the error. Before it, the error held the URL."""
    project = typescript_project(project_factory, hosts, plugin, f"typescript-apply-{len(secret)}")
    source = (project.dir / "index.ts").read_text()
    program = source.replace(
        "const egress = new proxy.ClusterProxy(",
        "const config = new pulumi.Config();\n"
        f'const upstreamUrl = config.requireSecret("upstreamSecret").apply({transform});\n'
        "const egress = new proxy.ClusterProxy(",
    )
    program = program.replace(
        '        proxy: { noProxy: ["fd00::/8"] },',
        '        proxy: { noProxy: ["fd00::/8"], upstream: { url: upstreamUrl } },',
    )
    assert "upstream: { url: upstreamUrl }" in program
    (project.dir / "index.ts").write_text(program)
    project.init()
    project.run("config", "set", "--secret", "upstreamSecret", secret)
    _fails_without_the_password(project, expected)


def test_typescript_preview_warns_of_a_user_name_that_may_hold_the_password(
    project_factory: Any, hosts: Path, plugin: Path
) -> None:
    """';' typed for ':' is a valid URL whose user name holds the password: the preview (through the component
    provider) warns naming the field, and shows neither the user name nor the password."""
    project = typescript_project(project_factory, hosts, plugin, "typescript-semicolon")
    source = (project.dir / "index.ts").read_text()
    program = source.replace(
        "const egress = new proxy.ClusterProxy(",
        "const config = new pulumi.Config();\nconst egress = new proxy.ClusterProxy(",
    )
    program = program.replace(
        '        proxy: { noProxy: ["fd00::/8"] },',
        '        proxy: { noProxy: ["fd00::/8"], upstream: { url: config.requireSecret("upstreamUrl") } },',
    )
    assert 'config.requireSecret("upstreamUrl")' in program
    (project.dir / "index.ts").write_text(program)
    project.init()
    project.run("config", "set", "--secret", "upstreamUrl", UPSTREAM.replace("svc:", "svc;"))
    result = project.run("preview")
    output = result.stdout + result.stderr
    assert "proxy.upstream.url: its user name holds ';' or ',' (a ':' mistyped?)" in output, output
    assert PASSWORD not in output
    assert "svc;" not in output
    assert PASSWORD not in json.dumps(project.export())
