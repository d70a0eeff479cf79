"""injection.clusterTrustBundle: the trusted CA as the project's ClusterTrustBundles, and the projected volume."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from cryptography import x509

from proxy_component.render import manifests, plain_plan, plain_values
from proxy_component.render.admission import admission_policy
from proxy_component.render.trust import (
    CTB_LABEL,
    CTB_SIGNER,
    PublicRoots,
    certifi_roots,
    cluster_trust_bundles,
    trust_volume,
)
from proxy_component.settings import SettingsError, ca_certificates, parse_settings
from tests.pki import make_ca, make_leaf

CORP = make_ca("Corp Inspecting CA")


def _raw(**injection: Any) -> dict[str, Any]:
    return {
        "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
        "proxy": {"upstream": {"url": "http://10.1.2.3:3128", "trustedCa": CORP.cert_pem}},
        "namespaces": ["apps"],
        "injection": {"admission": True, "clusterTrustBundle": True, **injection},
    }


def _certs(pem: str) -> list[x509.Certificate]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [x509.load_pem_x509_certificate(c.encode()) for c in ca_certificates(pem)]


def test_two_bundles_of_the_projects_signer_named_after_it() -> None:
    objs = cluster_trust_bundles(parse_settings(_raw()))
    assert [o["metadata"]["name"] for o in objs] == [
        "proxy-component.io:trust:corporate",
        "proxy-component.io:trust:merged",
    ]
    for obj, kind in zip(objs, ("corporate", "merged"), strict=True):
        assert obj["apiVersion"] == "certificates.k8s.io/v1"
        assert obj["spec"]["signerName"] == CTB_SIGNER
        assert obj["metadata"]["labels"][CTB_LABEL] == kind
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "proxy-component"
        assert obj["metadata"]["name"].startswith(CTB_SIGNER.replace("/", ":") + ":")
    assert _certs(objs[0]["spec"]["trustBundle"]) == _certs(CORP.cert_pem)


def test_the_merged_bundle_holds_only_anchors_the_api_server_takes_each_once() -> None:
    """kube-apiserver refuses a bundle with a duplicate, a certificate without CA basic constraints, or one Go's x509
    does not parse (a negative serial number): those public roots are left out, counted in the annotation."""
    roots = certifi_roots()
    # The corporate CA twice (once among the public roots), and a leaf: neither may reach the bundle twice or at all.
    extra = roots.pem + CORP.cert_pem + make_leaf(CORP, "leaf.example").cert_pem
    settings = parse_settings(_raw())
    (_, merged) = cluster_trust_bundles(settings, PublicRoots(extra, roots.source))
    certs = _certs(merged["spec"]["trustBundle"])
    ders = [c.tbs_certificate_bytes for c in certs]
    assert len(ders) == len(set(ders))
    for cert in certs:
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert cert.serial_number > 0
    assert _certs(CORP.cert_pem)[0] in certs
    (_, plain) = cluster_trust_bundles(settings, roots)
    total, kept = len(ca_certificates(roots.pem)), len(ca_certificates(plain["spec"]["trustBundle"])) - 1
    assert 0 < kept < total  # certifi has roots without CA basic constraints and one with a negative serial number
    assert plain["metadata"]["annotations"]["proxy-component.io/public-roots"] == (
        f"{roots.source} ({kept} certificates; {total - kept} more that the API server refuses left out)"
    )


def test_the_volume_projects_both_bundles_and_the_truststore_and_the_policy_adds_it() -> None:
    settings = parse_settings(_raw())
    volume = trust_volume(settings)
    assert volume["name"] == "proxy-trust"
    sources = volume["projected"]["sources"]
    assert [s["clusterTrustBundle"]["labelSelector"]["matchLabels"][CTB_LABEL] for s in sources[:2]] == [
        "corporate",
        "merged",
    ]
    assert sources[2] == {
        "configMap": {"name": "proxy-trust", "items": [{"key": "truststore.p12", "path": "truststore.p12"}]}
    }
    without = parse_settings(_raw(clusterTrustBundle=False))
    assert trust_volume(without) == {"name": "proxy-trust", "configMap": {"name": "proxy-trust"}}
    expression = admission_policy(settings, plain_values(settings))["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert "'clusterTrustBundle': dyn({'signerName': dyn('proxy-component.io/trust')" in expression
    spec = admission_policy(without, plain_values(without))["spec"]
    plain = spec["mutations"][0]["jsonPatch"]["expression"]
    # A Pod's projection of the bundles counts as the trust volume (one added by another consumer is not "other").
    (trust,) = [v["expression"] for v in spec["variables"] if v["name"] == "trust"]
    assert "s.clusterTrustBundle.signerName == 'proxy-component.io/trust'" in trust
    assert "'projected': dyn(" not in plain


def test_the_plan_has_the_bundles_before_the_policy_under_keys_no_setting_changes() -> None:
    planned = plain_plan(parse_settings(_raw()))
    keys = [p.key for p in planned]
    assert keys.index("cluster-trust-bundle/corporate") < keys.index("admission-policy")
    policy = next(p for p in planned if p.key == "admission-policy")
    assert policy.depends_on == ("cluster-trust-bundle/corporate", "cluster-trust-bundle/merged")
    off = [p.key for p in plain_plan(parse_settings(_raw(clusterTrustBundle=False)))]
    assert not [k for k in off if k.startswith("cluster-trust-bundle")]
    assert "proxy-trust/apps" in off
    assert "proxy-trust/apps" in keys
    kinds = [o["kind"] for o in manifests(parse_settings(_raw()))]
    assert kinds.count("ClusterTrustBundle") == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"], "kubernetesVersion": "1.36"}},
            "injection.clusterTrustBundle: cluster.kubernetesVersion '1.36' has no ClusterTrustBundle projection on by "
            "default (expected Kubernetes 1.37 or later",
        ),
        (
            {"proxy": {"upstream": {"url": "http://10.1.2.3:3128"}}},
            "injection.clusterTrustBundle: true needs proxy.upstream.trustedCa",
        ),
    ],
)
def test_refused_where_it_cannot_work_naming_the_field_and_value(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings({**_raw(), **change})
    assert message in str(caught.value)


def test_accepted_on_1_37_and_with_the_version_unset() -> None:
    for version in ("1.37", "v1.37.2", "1.38"):
        raw = _raw()
        raw["cluster"] = {**raw["cluster"], "kubernetesVersion": version}
        assert parse_settings(raw).injection.cluster_trust_bundle
