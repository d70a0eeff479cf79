"""Settings: each bad-input class has a fixture whose exact error text is asserted; good input parses either spelling."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from proxy_component.settings import Settings, SettingsError, load_settings, parse_settings

ERRORS = Path(__file__).parent / "settings_errors"
CASES = sorted(p.stem for p in ERRORS.glob("*.yaml"))


@pytest.mark.parametrize("case", CASES)
def test_bad_input_names_field_value_and_accepted(case: str) -> None:
    data = yaml.safe_load((ERRORS / f"{case}.yaml").read_text())
    expected = (ERRORS / f"{case}.expected").read_text().splitlines()
    with pytest.raises(SettingsError) as caught:
        parse_settings(data)
    assert caught.value.problems == expected


def test_every_error_case_has_its_expected_text() -> None:
    assert len(CASES) >= 25
    assert sorted(p.stem for p in ERRORS.glob("*.expected")) == CASES


def test_errors_never_echo_a_password() -> None:
    for case in CASES:
        text = (ERRORS / f"{case}.expected").read_text()
        assert "hunter2" not in text
        assert "p@ss" not in text
        assert "S3CRET" not in text
        assert "S3#" not in text


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings({"cluster": {"podCidrs": ["x"], "serviceCidrs": ["y"]}, "deployment": {"port": 0}})
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "cluster.podCidrs[0]",
        "cluster.serviceCidrs[0]",
        "deployment.port",
    ]


def test_the_seven_mistake_file_gives_one_ordered_list_whatever_the_key_order() -> None:
    data = yaml.safe_load((ERRORS / "seven_mistakes.yaml").read_text())
    expected = (ERRORS / "seven_mistakes.expected").read_text().splitlines()
    assert len(expected) >= 7

    def reversed_keys(value: object) -> object:
        if isinstance(value, dict):
            return {key: reversed_keys(value[key]) for key in reversed(list(value))}
        return value

    for given in (data, reversed_keys(data)):
        with pytest.raises(SettingsError) as caught:
            parse_settings(given)  # type: ignore[arg-type]
        assert caught.value.problems == expected


def test_a_check_whose_field_is_invalid_is_skipped_and_the_others_run() -> None:
    """cluster.kubernetesVersion is invalid: the admission check that reads it is skipped; the ipFamily check runs."""
    with pytest.raises(SettingsError) as caught:
        parse_settings(
            {
                "cluster": {"kubernetesVersion": "latest", "ipFamily": "ipv6", "serviceCidrs": ["10.96.0.0/12"]},
                "injection": {"admission": True},
            }
        )
    assert [p.split(":")[0] for p in caught.value.problems] == ["cluster.kubernetesVersion", "cluster.ipFamily"]


def test_settings_made_without_parse_settings_are_checked_too() -> None:
    """The model itself runs every check (all at once) when nothing defers them."""
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"injection": {"trustManager": True}, "deployment": {"enabled": False}})
    text = str(caught.value)
    assert "injection.trustManager: true needs proxy.upstream.trustedCa" in text
    assert "proxy.httpProxy: required when deployment.enabled is false" in text


def test_camel_and_snake_case_keys_give_the_same_settings() -> None:
    camel = parse_settings(
        {
            "cluster": {"dnsDomain": "k8s.internal", "podCidrs": ["10.244.0.0/16"]},
            "deployment": {"serviceName": "egress"},
        }
    )
    snake = parse_settings(
        {
            "cluster": {"dns_domain": "k8s.internal", "pod_cidrs": ["10.244.0.0/16"]},
            "deployment": {"service_name": "egress"},
        }
    )
    assert camel == snake
    assert camel.in_cluster_url == "http://egress.kube-system.svc.k8s.internal:8888"


def test_defaults_follow_the_runbook() -> None:
    settings = parse_settings({})
    assert settings.deployment.namespace == "kube-system"
    assert settings.deployment.service_name == "http-proxy"
    assert settings.deployment.port == 8888
    assert settings.deployment.connect_ports == [443]
    assert settings.http_proxy == settings.https_proxy == "http://http-proxy.kube-system.svc.cluster.local:8888"
    assert not settings.has_credentials


def test_cidrs_are_normalized_to_their_network() -> None:
    settings = parse_settings({"cluster": {"podCidrs": ["10.244.1.7/16", "FD00:10:0:0::1/56"]}})
    assert settings.cluster.pod_cidrs == ["10.244.0.0/16", "fd00:10::/56"]


@pytest.mark.parametrize(
    ("cidrs", "family"),
    [
        (["10.244.0.0/16"], "ipv4"),
        (["fd00:10::/56"], "ipv6"),
        (["fd00:10::/56", "10.244.0.0/16"], "dual"),
        ([], "ipv4"),
    ],
)
def test_ip_family_is_inferred_from_the_cidrs(cidrs: list[str], family: str) -> None:
    assert parse_settings({"cluster": {"serviceCidrs": cidrs}}).cluster.effective_ip_family == family


def test_credentials_in_a_proxy_url_are_detected() -> None:
    settings = parse_settings({"proxy": {"httpProxy": "http://user:pw@proxy.corp:3128"}})
    assert settings.has_credentials
    assert settings.https_proxy == "http://user:pw@proxy.corp:3128"


def test_upstream_credentials_from_url_or_fields() -> None:
    from_url = parse_settings({"proxy": {"upstream": {"url": "http://svc:s3cret@proxy.corp:3128"}}})
    from_fields = parse_settings(
        {"proxy": {"upstream": {"url": "http://proxy.corp:3128", "username": "svc", "password": "s3cret"}}}
    )
    for settings in (from_url, from_fields):
        assert settings.proxy.upstream is not None
        assert settings.proxy.upstream.credentials == ("svc", "s3cret")
        assert settings.proxy.upstream.endpoint == ("proxy.corp", 3128)
        assert not settings.has_credentials  # pods talk to tinyproxy, which holds the upstream credentials
    assert "s3cret" not in repr(from_fields)


def test_namespaces_are_sorted_and_unique() -> None:
    assert parse_settings({"namespaces": ["web", "default", "web"]}).namespaces == ["default", "web"]


def test_load_settings_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("cluster: [unclosed\n")
    with pytest.raises(SettingsError, match=r"broken\.yaml: not valid YAML"):
        load_settings(str(broken))
    with pytest.raises(SettingsError, match=r"missing\.yaml: cannot read"):
        load_settings(str(tmp_path / "missing.yaml"))


def test_settings_are_frozen() -> None:
    settings = parse_settings({})
    with pytest.raises(ValueError, match="frozen"):
        settings.namespaces = ["x"]  # type: ignore[misc]
    assert isinstance(settings, Settings)


def test_each_upstream_url_message_offers_only_what_the_next_run_accepts() -> None:
    """Issue 44: the upstream URL's messages offered `https://host:port`, which the next run refused. Every message
    for a malformed upstream URL offers http:// alone, and the URL it suggests parses."""
    for bad in ("proxy.corp:3128", "socks5://proxy.corp:1080", "http://proxy.corp:99999", "http://proxy.corp/x"):
        with pytest.raises(SettingsError) as caught:
            parse_settings({"proxy": {"upstream": {"url": bad}}})
        (problem,) = caught.value.problems
        assert problem.startswith("proxy.upstream.url: "), problem
        assert "https://" not in problem, problem
    assert parse_settings({"proxy": {"upstream": {"url": "http://proxy.corp:3128"}}}).proxy.upstream is not None
