"""The image's record of upstream tinyproxy's fixes after the commit it builds (docs/guides/images.md, "Upstream's
fixes after 364cdb6"): what it says is not applicable stays so, and the tests it cites exist.

Upstream's PR #618 frees a leaked URL on tinyproxy's reverse-proxy redirect path (`process_request`, a 301 from
`reverse_rewrite_url`), reached only when the config has a `ReversePath`. The image is built with reverse-proxy
support (images/proxy/tinyproxy/build.sh passes configure no `--disable-reverse`, whose default is yes), so what
keeps the path unreached is the rendered config: no `Reverse*` directive, whatever the settings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from proxy_component.dataplane.config import tinyproxy_conf
from proxy_component.settings import parse_settings

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {"podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"], "nodeCidrs": ["192.168.0.0/24"]}
UPSTREAM = {"url": "http://svc:pw@proxy.corp:3128", "noUpstream": ["*.corp.example", "10.10.0.0/16"]}
REVERSE = ("reversepath", "reverseonly", "reversemagic", "reversebaseurl")


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"proxy": {"upstream": UPSTREAM}},
        {"deployment": {"metrics": {"enabled": True}}},
        {"deployment": {"denyDestinations": []}},
        {"proxy": {"upstream": UPSTREAM}, "deployment": {"metrics": {"enabled": True}, "connectPorts": [443, 8443]}},
    ],
    ids=["default", "upstream", "metrics", "no-filter", "all"],
)
def test_the_rendered_config_never_turns_on_reverse_proxying(extra: dict[str, Any]) -> None:
    settings = parse_settings({"cluster": CLUSTER, **extra})
    for credentials in (True, False):
        conf = tinyproxy_conf(settings, settings.allowed_sources(), credentials=credentials)
        directives = {line.split()[0].lower() for line in conf.splitlines() if line.strip() and line[0] != "#"}
        assert not directives & set(REVERSE), conf


def test_the_build_keeps_configures_defaults() -> None:
    """The record says reverse-proxy support is compiled in: of tinyproxy's own configure options (its
    configure.ac's TP_ARG_ENABLE), build.sh passes only --disable-manpage_support."""
    build = (ROOT / "images/proxy/tinyproxy/build.sh").read_text()
    configure = build[build.index("./configure") :].split("\n\n")[0]
    features = {"debug", "xtinyproxy", "filter", "upstream", "reverse", "transparent", "manpage_support"}
    passed = set(re.findall(r"--(?:enable|disable)-(\w+)", configure))
    assert passed & features == {"manpage_support"}, configure


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_test_the_record_cites_exists() -> None:
    """Each `tests/...py::test_name` the record cites names a test function of that file."""
    text = (ROOT / "docs/guides/images.md").read_text()
    start = text.index("### Upstream's fixes after 364cdb6")
    record = text[start : text.index("\n## ", start) if "\n## " in text[start:] else len(text)]
    cited = re.findall(r"(tests/[\w/]+\.py)::(test_\w+)", record)
    assert len(cited) >= 5, cited
    for path, name in cited:
        assert name in _tests_in(ROOT / path), f"{path}::{name} is cited by the record but is no test there"
