"""`proxy-component check --probe URL...`: a short-lived pod per node, through that node's proxy, to each URL.

The pod, its script and the reading of its transcript are pure (`proxy_component.probe` says what a probe
verifies and how); this module runs them against a live cluster and deletes every pod it made, whatever happens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ..dataplane.common import APP_LABEL
from ..probe import (
    RUN_LABEL,
    ProbeResult,
    TlsClient,
    classify,
    nodes_of,
    parse_targets,
    parse_transcript,
    pod_script,
    probe_pod,
    run_id,
    tls_client,
    wait_until,
)
from ..settings import PROBE_NAMESPACE, Settings
from .cluster import (
    POD_LOGS,
    PODS,
    PROBE_CREATE,
    PROBE_DELETE,
    Access,
    CheckError,
    Cluster,
    Obj,
    explain,
)


def probe_cluster(
    settings: Settings,
    cluster: Cluster,
    urls: Sequence[str],
    *,
    wait: int = 10,
    deadline: int = 120,
    created: Callable[[str], None] | None = None,
) -> list[ProbeResult]:
    """`check --probe`: one pod per node that runs a proxy pod, each URL through that node's proxy (see probe.py).

    Every pod is deleted before this returns or raises (KeyboardInterrupt included): those it created, and any
    of this run's that a listing finds (a create interrupted after the API server took it). `created` is told
    each pod's name (for the tests).
    """
    d = settings.deployment
    if not d.enabled:
        raise CheckError("--probe: deployment.enabled is false: there is no node proxy to probe (expected true)")
    targets = parse_targets(urls)
    if not 1 <= wait <= deadline - 5:
        raise ValueError(
            f"--probe-timeout: {wait} does not fit --probe-deadline {deadline} (expected 1 <= timeout <= deadline - 5)"
        )
    stop = time.monotonic() + deadline
    run = run_id()
    names: list[tuple[str, str]] = []
    try:
        proxies = list(cluster.list(Access(PODS, d.namespace), label_selector=f"{APP_LABEL}={d.service_name}"))
        clients: dict[tuple[str, int], TlsClient] = {}
        for index, node in enumerate(nodes_of(proxies)):
            hellos: list[bytes | None] = []
            for j, target in enumerate(targets):
                if target.scheme == "https":
                    clients[node, j] = tls_client(target.host, settings.trusted_ca)
                hellos.append(clients[node, j].hello if (node, j) in clients else None)
            pod = probe_pod(settings, node, run, index, pod_script(targets, hellos, d.port, wait), deadline)
            _create_probe_pod(cluster, pod)
            names.append((node, pod["metadata"]["name"]))
            if created is not None:
                created(pod["metadata"]["name"])
        phases: dict[str, str] = {}
        seen: dict[str, Any] = {}

        def finished() -> bool:
            for item in cluster.list(Access(PODS, PROBE_NAMESPACE), label_selector=f"{RUN_LABEL}={run}"):
                phases[item.metadata.name] = (item.status.phase if item.status else None) or "Pending"
                seen[item.metadata.name] = item
            return all(phases.get(name) in ("Succeeded", "Failed") for _, name in names)

        wait_until(finished, stop)
        results: list[ProbeResult] = []
        upstream = settings.proxy.upstream is not None
        for node, name in names:
            phase = phases.get(name, "Pending")
            transcripts = None
            if phase in ("Succeeded", "Failed"):
                log = cluster.request(Access(POD_LOGS, PROBE_NAMESPACE), name, PROBE_NAMESPACE, container="probe")
                transcripts = parse_transcript(str(log), len(targets))
            if transcripts is None:
                listed = seen.get(name)
                pull = _pull_hint(settings) if listed is not None and _image_pull_failure(listed) else None
                detail = stalled(name, PROBE_NAMESPACE, node, deadline, phase, listed, pull)
                results += [ProbeResult(node, t.url, "timeout", detail) for t in targets]
                continue
            proxy_log = _proxy_log(cluster, settings, proxies, node, deadline)
            results += [
                classify(node, t, transcripts[j], wait=wait, tls=clients.get((node, j)), proxy_log=proxy_log,
                         upstream=upstream)
                for j, t in enumerate(targets)
            ]  # fmt: skip
        return results
    except Exception as exc:
        error = explain(exc, cluster)
        if error is None:
            raise
        raise error from None
    finally:
        _delete_probe_pods(cluster, run, [name for _, name in names])


def stalled(
    name: str, namespace: str, node: str, deadline: int, phase: str, pod: Any | None, pull: str | None = None
) -> str:
    """Why a probe pod gave no result, as far as its last listing shows, and where to look next: `pull` (what to do
    when its image could not be pulled), its events (the pod itself is deleted when check returns)."""
    state = [f"phase {phase}"]
    status = pod.status if pod is not None else None
    for condition in (status.conditions if status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            state.append(f"not scheduled: {condition.reason or 'unknown'}: {condition.message or ''}".rstrip(": "))
    for container in (status.container_statuses if status else None) or []:
        waiting = container.state.waiting if container.state else None
        if waiting is not None and waiting.reason:
            state.append(f"container {container.name} {waiting.reason}: {waiting.message or ''}".rstrip(": "))
    if pull is not None:
        hint = pull
    elif phase == "Pending":
        hint = (
            f"a Pending pod waits for its image (deployment.image, pulled by node {node} from its registry) or for "
            "room on the node"
        )
    else:
        hint = "a Running pod had not finished its URLs (raise --probe-deadline)"
    return (
        f"the probe pod {name} gave no complete result within {deadline} s ({'; '.join(state)}); {hint}; its "
        f"events outlive it: kubectl -n {namespace} get events --field-selector involvedObject.name={name}"
    )


def _proxy_log(cluster: Cluster, settings: Settings, proxies: list[Any], node: str, deadline: int) -> str:
    """The recent log of the proxy pod on `node` (its tinyproxy container); "" where it cannot be read."""
    d = settings.deployment
    for pod in proxies:
        if pod.spec and pod.spec.node_name == node:
            try:
                log = cluster.request(Access(POD_LOGS, d.namespace), pod.metadata.name, d.namespace,
                                      container="tinyproxy", since_seconds=deadline + 60)  # fmt: skip
            except Exception as exc:
                if getattr(exc, "status", None) is None:
                    raise
                return ""
            return str(log)
    return ""


def _create_probe_pod(cluster: Cluster, pod: Obj) -> None:
    """Create a probe pod; its namespace missing is a message that says how to make it."""
    try:
        cluster.request(Access(PROBE_CREATE, PROBE_NAMESPACE), PROBE_NAMESPACE, pod)
    except Exception as exc:
        if getattr(exc, "status", None) != 404:
            raise
        raise CheckError(
            f"--probe: the namespace {PROBE_NAMESPACE} does not exist: the probe's pods run there, where Pod Security "
            "enforces 'restricted' (apply `proxy-component render CONFIG --format check-rbac --probe`, which makes it)"
        ) from None


# A container's waiting reasons that say its image cannot be pulled (the kubelet's).
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def _image_pull_failure(pod: Any) -> str:
    """The kubelet's reason and message when the pod's container cannot get its image, else ""."""
    for status in getattr(pod.status, "container_statuses", None) or []:
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason in PULL_FAILURES:
            return f"{waiting.reason}: {waiting.message}" if waiting.message else str(waiting.reason)
    return ""


def _pull_hint(settings: Settings) -> str:
    """What to do when a probe pod's image could not be pulled: its registry's credentials, in the probe's namespace."""
    secrets = settings.deployment.image_pull_secrets
    where = (
        f"the Secrets deployment.imagePullSecrets names ({', '.join(secrets)}) must exist in namespace "
        f"{PROBE_NAMESPACE} too"
        if secrets
        else "if its registry needs credentials, name their Secret in deployment.imagePullSecrets and copy it into "
        f"namespace {PROBE_NAMESPACE}"
    )
    return f"its image could not be pulled: {where}"


def _delete_probe_pods(cluster: Cluster, run: str, names: list[str]) -> None:
    """Delete this run's pods: the known names, then whatever else carries the run's label."""
    namespace = PROBE_NAMESPACE
    try:
        listed = [p.metadata.name for p in cluster.list(Access(PODS, namespace), label_selector=f"{RUN_LABEL}={run}")]
    except Exception:
        listed = []
    for name in dict.fromkeys([*names, *listed]):
        try:
            cluster.request(Access(PROBE_DELETE, namespace), name, namespace, grace_period_seconds=0)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
