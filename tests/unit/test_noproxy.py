"""NO_PROXY composition: parsing, normalization, coverage, ordering, permutation invariance and provenance."""

from __future__ import annotations

import itertools
import random

import pytest

from proxy_component.noproxy import Category, Kind, NoProxyError, Source, compose, parse_entry
from proxy_component.settings import NetworkValues, parse_settings

SEED_000 = ".k8s.internal,.svc,localhost,127.0.0.1,10.0.0.0/8,fd00::/8"


@pytest.mark.parametrize(
    ("raw", "kind", "value", "port"),
    [
        ("Example.COM", Kind.HOST, "example.com", None),
        (".example.com", Kind.SUFFIX, "example.com", None),
        ("*.example.com", Kind.SUFFIX, "example.com", None),
        ("metadata.google.internal.", Kind.HOST, "metadata.google.internal.", None),
        ("registry.corp:5000", Kind.HOST, "registry.corp", 5000),
        ("10.0.0.1", Kind.IP, "10.0.0.1", None),
        ("10.0.0.1:8080", Kind.IP, "10.0.0.1", 8080),
        ("FD00:0:0:0::0001", Kind.IP, "fd00::1", None),
        ("[fd00::1]", Kind.IP, "fd00::1", None),
        ("10.1.2.3/8", Kind.CIDR, "10.0.0.0/8", None),
        ("fd00:10:0:0:0:0:0:1/56", Kind.CIDR, "fd00:10::/56", None),
        ("10.0.0.7/32", Kind.IP, "10.0.0.7", None),
        (" 192.168.0.0/16 ", Kind.CIDR, "192.168.0.0/16", None),
        ("*", Kind.WILDCARD, "*", None),
    ],
)
def test_entries_are_parsed_and_normalized(raw: str, kind: Kind, value: str, port: int | None) -> None:
    entry = parse_entry(raw)
    assert (entry.kind, entry.value, entry.port) == (kind, value, port)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "is empty"),
        ("a,b", "holds a separator"),
        ("http://x", "is a URL"),
        ("10.0.0.0/33", "is not a CIDR"),
        ("foo.*.com", "has a '*' that no client understands"),
        ("host:http", "is not a number from 1 to 65535"),
        ("[fd00::1]:80", "IPv6 address with a port"),
        ("fd00:::1::2", "is not an IP address or host name"),
        ("-bad-.com", "is not a valid host name"),
        ("999.1.1.1", "is neither an IP address nor a host name"),
    ],
)
def test_unparseable_entries_name_origin_and_reason(raw: str, reason: str) -> None:
    with pytest.raises(NoProxyError) as caught:
        parse_entry(raw, origin="proxy.noProxy[3]")
    message = str(caught.value)
    assert message.startswith(f"proxy.noProxy[3]: {raw!r} ")
    assert reason in message
    assert "expected a host name" in message


def test_suffixes_render_both_forms_and_ipv6_stays_bare() -> None:
    assert parse_entry(".svc").tokens() == ("svc", ".svc")
    assert parse_entry("fd00::1").tokens() == ("fd00::1",)
    assert parse_entry("registry.corp:5000").tokens() == ("registry.corp:5000",)


def _sources(values: list[tuple[str, Category]]) -> list[Source]:
    return [Source(v, c, f"test[{i}]") for i, (v, c) in enumerate(values)]


CLUSTER = [
    ("localhost", Category.LOOPBACK),
    ("127.0.0.1", Category.LOOPBACK),
    ("::1", Category.LOOPBACK),
    (".cluster.local", Category.CLUSTER_DOMAIN),
    (".svc", Category.CLUSTER_DOMAIN),
    ("10.96.0.0/12", Category.SERVICE_NETWORK),
    ("10.244.0.0/16", Category.POD_NETWORK),
    ("fd00:10:244::/56", Category.POD_NETWORK),
    ("10.0.0.0/8", Category.NODE_NETWORK),
    ("10.0.5.0/24", Category.NODE_NETWORK),
    ("api.example.eks.amazonaws.com", Category.API_SERVER),
    ("10.96.0.1", Category.API_SERVER),
    ("169.254.169.254", Category.CLOUD_METADATA),
    ("registry.corp", Category.USER),
    ("*.corp.example", Category.USER),
    ("10.244.0.0/16", Category.USER),
]


def test_any_permutation_gives_byte_identical_output() -> None:
    expected = str(compose(_sources(CLUSTER)))
    rng = random.Random(7)
    for _ in range(200):
        shuffled = CLUSTER[:]
        rng.shuffle(shuffled)
        assert str(compose(_sources(shuffled))) == expected


def test_all_permutations_of_a_small_list() -> None:
    small = [
        ("10.0.0.0/8", Category.USER),
        ("10.1.0.0/16", Category.POD_NETWORK),
        (".a.b", Category.USER),
        ("x.a.b", Category.USER),
    ]
    outputs = {str(compose(_sources(list(p)))) for p in itertools.permutations(small)}
    assert outputs == {"a.b,.a.b,10.0.0.0/8"}


def test_composition_is_idempotent() -> None:
    once = compose(_sources(CLUSTER))
    twice = compose(Source(token, e.category, "again") for e in once.entries for token in e.tokens())
    assert str(twice) == str(once)


def test_wider_cidrs_absorb_narrower_ones_of_the_same_family_only() -> None:
    composed = compose(
        _sources(
            [
                ("10.0.0.0/8", Category.NODE_NETWORK),
                ("10.244.0.0/16", Category.POD_NETWORK),
                ("10.0.5.0/24", Category.NODE_NETWORK),
                ("fd00::/8", Category.USER),
                ("fd00:10::/56", Category.POD_NETWORK),
                ("::ffff:10.0.0.0/104", Category.USER),
            ]
        )
    )
    assert [e.value for e in composed.entries] == ["10.0.0.0/8", "::ffff:a00:0/104", "fd00::/8"]
    node = composed.entries[0]
    assert node.covers == ("10.0.5.0/24 (test[2])", "10.244.0.0/16 (test[1])")


def test_exact_ips_are_kept_inside_cidrs_for_clients_without_cidr_support() -> None:
    composed = compose(_sources([("10.96.0.0/12", Category.SERVICE_NETWORK), ("10.96.0.1", Category.API_SERVER)]))
    assert str(composed) == "10.96.0.0/12,10.96.0.1"


def test_hosts_under_a_listed_suffix_are_dropped() -> None:
    composed = compose(
        _sources(
            [
                (".cluster.local", Category.CLUSTER_DOMAIN),
                ("api.cluster.local", Category.API_SERVER),
                ("cluster.local", Category.USER),
            ]
        )
    )
    assert str(composed) == "cluster.local,.cluster.local"


def test_duplicates_merge_their_provenance_into_the_first_category() -> None:
    composed = compose(_sources([("10.0.0.0/8", Category.USER), ("10.0.0.0/8", Category.NODE_NETWORK)]))
    (entry,) = composed.entries
    assert entry.category is Category.NODE_NETWORK
    assert entry.origins == ("test[0]", "test[1]")


def test_order_is_category_then_kind_then_value() -> None:
    composed = compose(_sources(CLUSTER))
    categories = [e.category for e in composed.entries]
    assert categories == sorted(categories)
    assert str(composed) == (
        "localhost,127.0.0.1,::1,[::1],cluster.local,.cluster.local,svc,.svc,fd00:10:244::/56,10.0.0.0/8,"
        "api.example.eks.amazonaws.com,10.96.0.1,169.254.169.254,corp.example,.corp.example,registry.corp,.registry.corp"
    )
    # 10.96.0.0/12 (services), 10.244.0.0/16 (pods) and 10.0.5.0/24 sit inside the node range 10.0.0.0/8.
    (node,) = [e for e in composed.entries if e.category is Category.NODE_NETWORK]
    assert [c.split()[0] for c in node.covers] == ["10.0.5.0/24", "10.244.0.0/16", "10.96.0.0/12"]


def test_settings_compose_every_category_in_order() -> None:
    settings = parse_settings(
        {
            "cluster": {
                "dnsDomain": "k8s.internal",
                "serviceCidrs": ["172.20.0.0/16"],
                "podCidrs": ["10.244.0.0/16"],
                "nodeCidrs": ["192.168.0.0/24"],
                "apiServerHosts": ["https://ABC.gr7.us-east-1.eks.amazonaws.com"],
                "cloud": "aws",
                "region": "us-east-1",
            },
            "proxy": {"noProxy": ["registry.corp"]},
        }
    )
    assert str(settings.no_proxy()) == (
        "localhost,127.0.0.1,::1,k8s.internal,.k8s.internal,svc,.svc,kubernetes,kubernetes.default,"
        "172.20.0.0/16,10.244.0.0/16,192.168.0.0/24,abc.gr7.us-east-1.eks.amazonaws.com,"
        "ec2.internal,.ec2.internal,169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254,registry.corp,.registry.corp"
    )


def test_network_values_add_to_settings_with_their_origin() -> None:
    settings = parse_settings({"cluster": {"podCidrs": ["10.244.0.0/16"]}})
    network = NetworkValues(origin="eks", service_cidrs=["172.20.0.0/16"], api_server_hosts=["https://x.example.com"])
    composed = settings.no_proxy(network)
    origins = {e.value: e.origins for e in composed.entries}
    assert origins["172.20.0.0/16"] == ("eks.serviceCidrs[0]",)
    assert origins["10.244.0.0/16"] == ("cluster.podCidrs[0]",)
    assert origins["x.example.com"] == ("eks.apiServerHosts[0]",)


def test_a_bad_network_value_names_its_origin() -> None:
    settings = parse_settings({})
    with pytest.raises(NoProxyError, match=r"^eks\.podCidrs\[1\]: '10\.0\.0\.0/99' is not a CIDR"):
        settings.no_proxy(NetworkValues(origin="eks", pod_cidrs=["10.1.0.0/16", "10.0.0.0/99"]))


@pytest.mark.parametrize(
    ("cloud", "expected"),
    [
        ("none", []),
        ("aws", ["169.254.169.254", "169.254.170.23", "fd00:ec2::23", "fd00:ec2::254"]),
        ("gcp", ["metadata", "metadata.google.internal", "169.254.169.254"]),
        ("azure", ["168.63.129.16", "169.254.169.254"]),
    ],
)
def test_cloud_metadata_endpoints(cloud: str, expected: list[str]) -> None:
    composed = parse_settings({"cluster": {"cloud": cloud}}).no_proxy()
    assert [e.value for e in composed.entries if e.category is Category.CLOUD_METADATA] == expected


@pytest.mark.parametrize(
    ("region", "suffix"), [("us-east-1", "ec2.internal"), ("eu-west-1", "eu-west-1.compute.internal")]
)
def test_aws_internal_dns_suffix(region: str, suffix: str) -> None:
    composed = parse_settings({"cluster": {"cloud": "aws", "region": region}}).no_proxy()
    assert f"{suffix},.{suffix}" in str(composed)


def test_seed_000_entries_are_all_covered_by_the_example() -> None:
    from importlib.resources import files

    import yaml

    settings = parse_settings(yaml.safe_load(files("proxy_component").joinpath("data/example.yaml").read_text()))
    tokens = set(settings.no_proxy().tokens())
    assert set(SEED_000.split(",")) - tokens == set()
    assert settings.in_cluster_url == "http://http-proxy.kube-system.svc.k8s.internal:8888"


def test_explain_names_every_entry_with_its_origin() -> None:
    settings = parse_settings({"cluster": {"podCidrs": ["10.244.0.0/16"]}, "proxy": {"noProxy": ["10.0.0.0/8"]}})
    lines = settings.no_proxy().explain()
    assert lines[0].split() == ["localhost", "loopback", "loopback"]
    assert lines[-1].endswith("proxy.noProxy[0]; covers 10.244.0.0/16 (cluster.podCidrs[0])")


def test_extra_entries_come_last_as_their_own_category_and_leave_the_default_alone() -> None:
    settings = parse_settings({"cluster": {"podCidrs": ["10.244.0.0/16"]}, "proxy": {"noProxy": ["zz.corp"]}})
    plain = str(settings.no_proxy())
    extra = [("svc-b", "chart b"), ("svc-a", "chart a"), ("ZZ.corp", "chart z")]
    composed = settings.no_proxy(extra=extra)
    assert Category.CHART > Category.USER
    assert str(composed) == f"{plain},svc-a,svc-b"
    assert [(e.value, e.category, e.origins) for e in composed.entries[-2:]] == [
        ("svc-a", Category.CHART, ("chart a",)),
        ("svc-b", Category.CHART, ("chart b",)),
    ]
    # A value the user lists already keeps its place (the lower category) and gains the origin.
    assert composed.entries[-3].value == "zz.corp"
    assert composed.entries[-3].origins == ("chart z", "proxy.noProxy[0]")
    assert settings.no_proxy_sources(extra=extra)[-3:] == [Source(v, Category.CHART, o) for v, o in extra]
    assert str(settings.no_proxy()) == plain
    reversed_extra = str(settings.no_proxy(extra=extra[::-1]))
    assert reversed_extra == str(composed)


def test_a_bad_extra_entry_names_its_origin() -> None:
    with pytest.raises(NoProxyError, match=r"^helm profile x: 'http://a' is a URL"):
        parse_settings({}).no_proxy(extra=[("http://a", "helm profile x")])
