"""The injection candidates scored by the client model: the checked-in table, and the default it decides."""

from __future__ import annotations

from proxy_component.injections import CANDIDATES, SELECTIONS, score, winner
from proxy_component.render.env import NO_PROXY_SPELLINGS
from tests.examples import EXAMPLES, clusters
from tests.injection_table import DOC, render


def test_the_checked_in_table_is_what_the_code_generates_now() -> None:
    assert DOC.read_text() == render(), "run: .venv/bin/python -m tests.injection_table"


def test_the_default_injection_is_the_models_winner_and_no_client_raises_under_it() -> None:
    examples = clusters()
    assert [c.name for c in examples] == list(EXAMPLES)
    assert len(examples) == 5
    scores = {c.key: [score(c, cluster) for cluster in examples] for c in CANDIDATES}
    best = winner(scores)
    assert best.table == NO_PROXY_SPELLINGS
    assert best.node is None
    assert all(s.errors == 0 and s.raising == () for s in scores[best.key])
    assert len(SELECTIONS) == 8
    # The rule is not vacuous: the 0.1 injection (the composed list in both spellings) makes httpx raise.
    assert any(s.errors for s in scores["A"])
    assert {client for s in scores["A"] for client, _ in s.raising} == {"python-httpx"}
