"""The trust group (proxy.upstream.trustedCa) through the real charts: where a profile gives the proxy env, the
container also gets the `proxy-trust` mount and the four trust variables, and its pod the volume; a profile whose
chart takes no volume for those containers gives none of it (a variable naming a missing file breaks TLS)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy_component.render.helm import PROFILES, helm_values, merge_values, profile_values
from proxy_component.render.trust import BUNDLE_NAME, MOUNT_PATH, trust_env_pairs
from proxy_component.settings import Settings, parse_settings
from tests.helm.lane import CHART_ARCHIVES, PROVEN, Lane, containers, left_out_by, pod_specs, release_of, settings_of
from tests.pki import make_ca

TRUST_NAMES = tuple(name for name, _ in trust_env_pairs())


def _trusted(example: str) -> Settings:
    settings = settings_of(example).model_dump(by_alias=True, exclude_none=True, mode="json")
    upstream = settings["proxy"].setdefault("upstream", {"url": "http://proxy.corp.example:3128"})
    upstream["trustedCa"] = make_ca("Corp Inspecting CA").cert_pem
    return parse_settings(settings)


def _render(lane: Lane, profile: str, chart: str, settings: Settings) -> tuple[dict[str, Any], ...]:
    values = merge_values(dict(CHART_ARCHIVES[chart].needs), helm_values(profile, profile_values(settings, profile)))
    rendered = lane.render(chart, release_of(profile, chart), values)
    assert rendered.returncode == 0, rendered.stderr
    return rendered.objects


@pytest.mark.parametrize(
    ("profile", "chart"), [(p, c) for p, charts in sorted(PROVEN.items()) for c in charts], ids=lambda v: str(v)
)
@pytest.mark.parametrize("example", ["corporate-proxy", "ipv6-only"])
def test_each_container_with_the_proxy_gets_the_trust_group_where_the_chart_takes_the_mount(
    lane: Lane, profile: str, chart: str, example: str
) -> None:
    objects = _render(lane, profile, chart, _trusted(example))
    trusted = bool(PROFILES[profile].trust_keys)
    want = dict(trust_env_pairs())
    checked = 0
    for obj in objects:
        for spec in pod_specs(obj):
            volumes = {v["name"]: v for v in spec.get("volumes") or []}
            for key in ("initContainers", "containers"):
                for c in spec.get(key) or []:
                    env = {e["name"]: e.get("value") for e in c.get("env") or []}
                    mounts = [m for m in c.get("volumeMounts") or [] if m["name"] == BUNDLE_NAME]
                    where = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
                    (container,) = [
                        x for x in containers((obj,)) if x.name == c["name"] and x.init == (key == "initContainers")
                    ]
                    if not trusted or not container.has_proxy:
                        assert not set(TRUST_NAMES) & set(env), f"{where}: a trust variable without the mount"
                        assert not mounts or left_out_by(profile, container) is None, where
                        continue
                    checked += 1
                    assert {n: env.get(n) for n in TRUST_NAMES} == want, where
                    assert mounts == [{"name": BUNDLE_NAME, "mountPath": MOUNT_PATH, "readOnly": True}], where
                    assert volumes.get(BUNDLE_NAME) == {"name": BUNDLE_NAME, "configMap": {"name": BUNDLE_NAME}}, where
    assert (checked > 0) == trusted, f"{profile}: {checked} containers got the trust group"


@pytest.mark.parametrize("profile", sorted(PROVEN))
def test_without_a_trusted_ca_no_trust_key_is_set(profile: str) -> None:
    settings = settings_of("corporate-proxy")
    values = helm_values(profile, profile_values(settings, profile))
    text = repr(values)
    assert BUNDLE_NAME not in text
    assert not [name for name in TRUST_NAMES if name in text]
