"""`mask_url`: what of a value that may hold a credential a message shows, for each way a typo moves the password."""

from __future__ import annotations

import pytest

from proxy_component.redaction import mask_url

PW = "S3cr3tPassw0rd"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (f"http://svc:{PW}@proxy.corp:3128", "http://***@proxy.corp:3128"),
        ("http://proxy.corp:3128", "http://proxy.corp:3128"),
        ("https://[fd00::1]:3128", "https://[fd00::1]:3128"),
        ("https://rancher.example/k8s/clusters/c-abc", "https://rancher.example/k8s/clusters/c-abc"),
        ("socks5://proxy.corp:1080", "socks5://proxy.corp:1080"),
        ("HTTP://proxy.corp:3128", "http://proxy.corp:3128"),
        # No '://': no scheme is shown, the host after the last '@' is.
        (f"http//svc:{PW}@proxy.corp:3128", "***@proxy.corp:3128"),
        (f"svc:{PW}@proxy.corp:3128", "***@proxy.corp:3128"),
        # A scheme that is no known name could be anything.
        (f"htp://svc:{PW}@proxy.corp:3128", "***://***@proxy.corp:3128"),
        # No '@': the password runs into where the host would be.
        (f"http://svc:{PW}proxy.corp:3128", "http://***"),
        (f"http://svc:{PW};proxy.corp:3128", "http://***"),
        (f"http://svc:{PW}/proxy.corp:3128", "http://***"),
        # ... or into the port, when the password is digits: with no '@' and a path, the port is never shown.
        ("http://svc:73190/proxy.corp:3128", "http://svc:***/***"),
        ("http://proxy.corp:3128/path", "http://proxy.corp:***/path"),
        # Two '@': everything before the last one is hidden.
        (f"http://svc@{PW}@proxy.corp:3128", "http://***@proxy.corp:3128"),
        (f"http://svc:{PW}@proxy.corp@3128", "http://***@3128"),
        # A host that is no host name is hidden whole.
        ("http://'proxy':3128", "http://***"),
        (f"http://svc:{PW}@proxy.corp 3128", "http://***@***"),
        (f"http://svc:{PW}@proxy.corp#3128", "http://***@proxy.corp#***"),
        ("", "***"),
        ("10.0.0.1/33", "10.0.0.1/33"),
    ],
)
def test_what_a_message_shows(value: str, shown: str) -> None:
    assert mask_url(value) == shown
    assert PW not in mask_url(value)
