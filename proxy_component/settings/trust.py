"""The CA bundle of a TLS-inspecting upstream (`proxy.upstream.trustedCa`): PEM certificates, each checked to be a
CA valid now, in a canonical order; `ca_certificates` splits the bundle again."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")
_PEM_ACCEPTED = "expected one or more PEM blocks '-----BEGIN CERTIFICATE-----', each a CA certificate valid now"


def _pem_text(value: Any) -> Any:
    """A list of PEM texts is one bundle: the YAML file and stack config may give either."""
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise ValueError(f"a list of {sorted({type(v).__name__ for v in value})} ({_PEM_ACCEPTED})")
        return "\n".join(value)
    return value


def _trusted_ca(value: str) -> str:
    """CA certificates in PEM: each parsed, a CA, valid now; canonical order (by SHA-256), duplicates dropped.

    The text is never echoed in an error: a private key pasted here by mistake must not reach a log.
    """
    from datetime import datetime, timezone

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    begins = _PEM_BEGIN.findall(value)
    if any("PRIVATE KEY" in label for label in begins):
        raise ValueError(
            f"holds a private key (-----BEGIN {next(lb for lb in begins if 'PRIVATE KEY' in lb)}-----; value hidden): "
            f"a trust bundle is public, never give a key here ({_PEM_ACCEPTED})"
        )
    blocks = _PEM_BLOCK.findall(value)
    if not begins:
        raise ValueError(f"no PEM block found ({_PEM_ACCEPTED})")
    if len(blocks) != len(begins):
        raise ValueError(
            f"{len(begins)} BEGIN lines but {len(blocks)} complete blocks: the PEM is truncated ({_PEM_ACCEPTED})"
        )
    now = datetime.now(timezone.utc)
    unique: dict[bytes, str] = {}
    for i, (label, _body) in enumerate(blocks, 1):
        where = f"block {i} of {len(blocks)}"
        if label != "CERTIFICATE":
            raise ValueError(f"{where} is '{label}', not a certificate ({_PEM_ACCEPTED})")
        text = f"-----BEGIN CERTIFICATE-----\n{_body}-----END CERTIFICATE-----\n"
        try:
            cert = x509.load_pem_x509_certificate(text.encode("ascii", "replace"))
            subject = cert.subject.rfc4514_string() or "(empty subject)"
        except ValueError as exc:
            raise ValueError(f"{where} is not a readable X.509 certificate ({exc}; {_PEM_ACCEPTED})") from None
        try:
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            ca = False
        if not ca:
            raise ValueError(
                f"{where} ({subject}) is not a CA certificate (no basicConstraints CA:TRUE): give the CA that signs "
                f"the proxy's certificates, not a server certificate ({_PEM_ACCEPTED})"
            )
        try:
            signs = cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
        except x509.ExtensionNotFound:
            signs = True
        if not signs:
            raise ValueError(
                f"{where} ({subject}) has a key usage without keyCertSign, so it cannot sign ({_PEM_ACCEPTED})"
            )
        if cert.not_valid_after_utc < now:
            raise ValueError(
                f"{where} ({subject}) expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC ({_PEM_ACCEPTED})"
            )
        if cert.not_valid_before_utc > now:
            raise ValueError(
                f"{where} ({subject}) is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC "
                f"({_PEM_ACCEPTED})"
            )
        unique[cert.fingerprint(hashes.SHA256())] = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    return "".join(unique[k] for k in sorted(unique))


TrustedCa = Annotated[str, BeforeValidator(_pem_text), AfterValidator(_trusted_ca)]


def ca_certificates(bundle: str) -> list[str]:
    """The PEM certificates of a canonical trustedCa bundle, one text each."""
    return [f"-----BEGIN CERTIFICATE-----\n{body}-----END CERTIFICATE-----\n" for _, body in _PEM_BLOCK.findall(bundle)]


@functools.cache
def certifi_changed() -> str | None:
    """Where certifi's `cacert.pem` is, when it is not the file certifi's installer wrote (the sha256 its RECORD
    holds): something on this machine changed it, often by appending a machine's own CA. None when it is as
    installed, or when there is no RECORD to compare with. The merged `proxy-trust` bundle starts from that file,
    so a changed one would put this machine's extra roots into every pod's trust, and make the render depend on
    the machine. Read once per process."""
    import base64
    import hashlib
    from importlib import metadata
    from pathlib import Path

    import certifi

    where = Path(certifi.where()).resolve()
    try:
        files = metadata.files("certifi") or []
    except metadata.PackageNotFoundError:
        return None
    for recorded in files:
        if recorded.name != "cacert.pem" or recorded.hash is None or recorded.hash.mode != "sha256":
            continue
        if Path(str(recorded.locate())).resolve() != where:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(where.read_bytes()).digest()).rstrip(b"=").decode()
        return None if digest == recorded.hash.value else str(where)
    return None
