"""The client model against each client's own test suite: every case its maintainers wrote, as data.

tests/fixtures/client_suites/ holds one fixture per client (README.md there says what was taken and what was
left out). Each case is an environment and a URL with the decision the client's own test expects; every case
must be the model's decision, unless the fixture lists it as an exception with its evidence, and a listed
exception must still disagree (a fixed model makes it stale, and the test says so). The figure at the end
gives the cases and agreement per client.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.clients import CLIENT_IDS, client, decide

SUITES = Path(__file__).parents[1] / "fixtures" / "client_suites"

# A case that names only a NO_PROXY value (`no_proxy`) tests the client's NO_PROXY check alone (a function such
# as urllib's proxy_bypass_environment or curl's Curl_check_noproxy): it runs with a proxy for both schemes.
FUNCTION_PROXY = "http://proxy.invalid:3128"


@dataclass(frozen=True)
class Case:
    client: str
    test: str
    env: Mapping[str, str]
    url: str
    expect: str
    exception: Mapping[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.client}: {self.test} [{self.url}]"


def _env(c: str, raw: Mapping[str, Any]) -> dict[str, str]:
    if "env" in raw:
        env = {str(k): str(v) for k, v in raw["env"].items()}
    else:
        value = str(raw["no_proxy"])
        env = {name: FUNCTION_PROXY for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
        env |= {"no_proxy": value, "NO_PROXY": value}
    for name, value in client(c).requires:
        env.setdefault(name, value)
    return env


def _fixtures() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted(SUITES.glob("*.yaml"))]


def _cases() -> Iterator[Case]:
    for doc in _fixtures():
        for c in (doc["client"], *doc.get("also", ())):
            for raw in doc["cases"]:
                yield Case(c, raw["test"], _env(c, raw), raw["url"], raw["expect"], raw.get("exception"))


CASES = list(_cases())


def test_every_fixture_names_a_modelled_client_and_its_source() -> None:
    docs = _fixtures()
    assert docs
    for doc in docs:
        assert doc["client"] in CLIENT_IDS, doc["client"]
        assert set(doc.get("also", ())) <= set(CLIENT_IDS)
        assert doc["repository"], doc["client"]
        assert doc["ref"], doc["client"]
        assert len(doc["commit"] or "") == 40 or doc.get("copy"), (
            f"{doc['client']}: a commit, or the copy the cases were read from"
        )
        for raw in doc["cases"]:
            assert raw["expect"] in ("bypass", "proxy", "error"), raw
            assert ("env" in raw) != ("no_proxy" in raw), raw
            if raw.get("exception"):
                assert raw["exception"]["why"], raw
                assert raw["exception"]["evidence"], raw


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_model_decides_as_the_clients_own_test(case: Case) -> None:
    got = decide(case.client, case.env, case.url)
    if case.exception is None:
        assert got == case.expect, f"env={dict(case.env)}"
    else:
        assert got != case.expect, f"listed as an exception, but the model now agrees: {case.exception['why']}"


def test_the_figure(capsys: pytest.CaptureFixture[str]) -> None:
    """Cases and agreement per client; fails below 100% of the cases not listed as exceptions."""
    rows: dict[str, list[int]] = {}
    for case in CASES:
        row = rows.setdefault(case.client, [0, 0, 0])
        row[0] += 1
        agreed = decide(case.client, case.env, case.url) == case.expect
        row[1] += agreed
        row[2] += case.exception is not None
    lines = [f"{'client':24} {'cases':>5} {'agreed':>6} {'listed':>6}"]
    lines += [f"{c:24} {n:5} {a:6} {x:6}" for c, (n, a, x) in sorted(rows.items())]
    total = [sum(r[i] for r in rows.values()) for i in range(3)]
    lines.append(f"{'all':24} {total[0]:5} {total[1]:6} {total[2]:6}")
    with capsys.disabled():
        print("\nclient suites against the model\n" + "\n".join(lines))
    assert all(a + x == n for n, a, x in rows.values())
