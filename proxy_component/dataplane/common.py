"""What every data-plane object shares: the proxy's labels and names, and the security context of its restricted
containers."""

from __future__ import annotations

from typing import Any

from ..settings import Settings

__all__ = ["APP_LABEL", "config_name", "labels", "restricted_security_context"]

Obj = dict[str, Any]

APP_LABEL = "app"


def labels(settings: Settings) -> dict[str, str]:
    """Labels of every proxy object; `app` is what the runbook's `kubectl get pods -l app=http-proxy` selects."""
    return {
        APP_LABEL: settings.deployment.service_name,
        "app.kubernetes.io/name": "tinyproxy",
        "app.kubernetes.io/component": "egress-proxy",
        "app.kubernetes.io/part-of": "proxy-component",
    }


def config_name(settings: Settings) -> str:
    return f"{settings.deployment.service_name}-config"


def restricted_security_context() -> Obj:
    """A container's securityContext for Pod Security `restricted`: non-root, read-only, no capability at all."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
