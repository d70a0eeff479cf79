"""The client model against the real clients on the probe matrix (tests/integration/real_clients/probe.py).

Each NO_PROXY value alone (suffix forms, `*`, ports, CIDRs, bare and bracketed
IPv6, `0.1`, spaces, upper case), every spelling-precedence case, and Java's
nonProxyHosts patterns: every real decision of the 16 clients must be the
model's. This is the matrix that docs/client-probe.md shows.
"""

from __future__ import annotations

import pytest

from tests.integration.real_clients import REAL_CLIENTS
from tests.integration.real_clients.compare import mismatches
from tests.integration.real_clients.probe import (
    JAVA_PATTERNS,
    NO_PROXY_VALUES,
    PRECEDENCE,
    URLS,
    java_options,
    probe_env,
)


@pytest.mark.parametrize("value", NO_PROXY_VALUES)
def test_the_model_predicts_each_client_on_one_entry(value: str) -> None:
    differ = mismatches(probe_env(value), URLS, REAL_CLIENTS)
    assert not differ, f"NO_PROXY={value!r}\n" + "\n".join(differ)


@pytest.mark.parametrize("case", range(len(PRECEDENCE)), ids=[label for label, _, _ in PRECEDENCE])
def test_the_model_knows_which_spelling_wins(case: int) -> None:
    _, env, urls = PRECEDENCE[case]
    clients = tuple(c for c in REAL_CLIENTS if c != "java")
    differ = mismatches(env, urls, clients)
    assert not differ, "\n".join(differ)


@pytest.mark.parametrize("pattern", JAVA_PATTERNS)
def test_the_model_reads_java_non_proxy_hosts(pattern: str) -> None:
    env = {"JAVA_TOOL_OPTIONS": java_options(pattern)}
    differ = mismatches(env, URLS, ("java",))
    assert not differ, f"-Dhttp.nonProxyHosts={pattern!r}\n" + "\n".join(differ)
