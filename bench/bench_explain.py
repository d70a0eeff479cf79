"""Benchmark the client model: `explain` (every destination x 18 clients) and `decide` alone, as lists grow.

Run from the repository root:

    .venv/bin/python bench/bench_explain.py

For the IPv6-only example with 0, 100 and 1,000 extra noProxy entries it reports the composed list's
length, the number of cells `evaluate` judges, its wall time (median of 5) and the time per `decide` call.
The component runs `evaluate` once per preview, so it must stay well under a second for real lists.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy_component.clients import CLIENTS, decide  # noqa: E402
from proxy_component.explain import evaluate, workload_env  # noqa: E402
from proxy_component.settings import parse_settings  # noqa: E402


def _median(run: object, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    base = yaml.safe_load((ROOT / "examples/ipv6-only/proxy.yaml").read_text())
    print(f"{'extra entries':>13} {'tokens':>7} {'cells':>6} {'evaluate s':>11} {'decide us':>10}")
    for extra in (0, 100, 1000):
        data = {**base, "proxy": {**base["proxy"], "noProxy": [*base["proxy"]["noProxy"], *(
            f"host-{i}.corp.example" for i in range(extra))]}}  # fmt: skip
        settings = parse_settings(data)
        no_proxy = settings.no_proxy()
        cells = evaluate(settings, no_proxy)
        took = _median(lambda s=settings, n=no_proxy: evaluate(s, n))
        env = workload_env(settings, no_proxy)
        calls = [(c, "http://github.com/") for c in CLIENTS]
        per_call = _median(lambda e=env, cs=calls: [decide(c, e, u) for c, u in cs]) / len(calls)
        print(f"{extra:>13} {len(no_proxy.tokens()):>7} {len(cells):>6} {took:>11.3f} {per_call * 1e6:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
