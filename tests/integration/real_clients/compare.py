"""The client model next to the real clients: one line per decision on which they differ."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proxy_component.clients import decide

from .harness import decide_many


def mismatches(env: Mapping[str, str], urls: Sequence[str], clients: Sequence[str]) -> list[str]:
    """`client url real X model Y` for every (client, url) where the real client and the model disagree."""
    real = decide_many(env, urls, clients)
    return [
        f"{client:<22} {url:<45} real {real[client][url]:<6} model {decide(client, env, url)}"
        for client in clients
        for url in urls
        if real[client][url] != decide(client, env, url)
    ]
