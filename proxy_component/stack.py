"""The per-cluster stack program: settings from stack config, one ClusterProxy, its values exported.

The root `Pulumi.yaml` runs this; each cluster is a stack (`Pulumi.<cluster>.yaml`)
whose `proxy-component:` keys hold the same settings as the command's YAML file.
`proxy-component:discover` names an existing EKS, GKE or AKS cluster whose
network is then read from the cloud instead of typed into the config.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi.runtime.config import CONFIG, get_config, get_config_env
from pydantic.alias_generators import to_camel

from .component import ClusterProxy, ClusterProxyArgs, read_stack_outputs, stack_identity
from .discovery import ClusterNetwork
from .layers import (
    CLUSTER,
    INSTALLATION,
    INSTALLATION_KEY,
    INSTALLATION_STACK_KEY,
    LAYER_KEY,
    LAYER_KEYS,
    OUTPUT,
    Layer,
    Layered,
    check_installation,
    installation_layer,
    merge_layers,
    project_config,
    with_project_config,
)
from .live.adopt import (
    Existing,
    decide,
    fields_not_set,
    hand_over,
    is_kubectl,
    kubectl_fields_missing,
    left_behind_objects,
    object_path,
    read_existing,
    request,
    status_message,
    template_changes,
)
from .live.cluster import kubeconfig_path
from .live.preview import cluster_problems, context_problems, live_kubernetes_version
from .render import plain_plan
from .settings import NETWORK_FIELDS, Settings, SettingsError, parse_settings, redact_url

__all__ = ["CONFIG_NAMESPACE", "Discover", "discover_from_config", "main", "settings_from_config", "stop_quietly"]

CONFIG_NAMESPACE = "proxy-component"
# The settings' top-level keys, as the YAML file spells them (camelCase).
SETTINGS_KEYS = tuple(info.alias or name for name, info in Settings.model_fields.items())
PROVIDER_KEYS = (
    "renderYamlToDirectory",
    "kubeconfig",
    "context",
    "adoptExisting",
    "adoptFrom",
    "managementKubeconfig",
    "managementContext",
)
DISCOVER_KEY = "discover"

_DISCOVER = f"{CONFIG_NAMESPACE}:{DISCOVER_KEY}"
# For each cloud: the keys it requires, then those it also accepts.
_CLOUD_KEYS = {
    "aws": (("name",), ("region",)),
    "gcp": (("name", "location"), ("project",)),
    "azure": (("name", "resourceGroup"), ()),
}
_OVERRIDE_KEYS = {to_camel(name): name for name in (*NETWORK_FIELDS, "ip_family")}


@dataclass(frozen=True)
class Discover:
    """An existing cluster to read the network of, from `proxy-component:discover`."""

    cloud: str
    name: str
    region: str | None = None
    location: str | None = None
    project: str | None = None
    resource_group: str | None = None
    override: Mapping[str, Any] = field(default_factory=dict)

    def network(self) -> ClusterNetwork:
        """The cluster's network through the cloud's get-function; `override` replaces fields, named in provenance."""
        if self.cloud == "aws":
            from .discovery import eks

            network = eks.from_existing(self.name, region=self.region)
        elif self.cloud == "gcp":
            from .discovery import gke

            network = gke.from_existing(self.name, self.location or "", self.project)
        else:
            from .discovery import aks

            network = aks.from_existing(self.name, self.resource_group or "")
        if self.override:
            network = network.override(origin=f"{_DISCOVER}.override", **self.override)
        return network


def discover_from_config(value: Any) -> Discover | None:
    """Validate `proxy-component:discover` ({cloud, name, region | location, project | resourceGroup, override})."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SettingsError([f"{_DISCOVER}: {value!r} is not an object (expected e.g. {{cloud: aws, name: prod}})"])
    cloud = value.get("cloud")
    if cloud not in _CLOUD_KEYS:
        raise SettingsError([f"{_DISCOVER}.cloud: {cloud!r} is not a cloud (expected aws, gcp or azure)"])
    needed, optional = _CLOUD_KEYS[cloud]
    accepted = ("cloud", *needed, *optional, "override")
    problems = [
        f"{_DISCOVER}.{key}: unknown key for cloud {cloud} (accepted: {', '.join(sorted(accepted))})"
        for key in sorted(set(value) - set(accepted))
    ]
    for key in (*needed, *optional):
        given = value.get(key)
        if key in needed and given is None:
            problems.append(f"{_DISCOVER}.{key}: required for cloud {cloud}")
        elif given is not None and (not isinstance(given, str) or not given):
            problems.append(f"{_DISCOVER}.{key}: {given!r} is not a non-empty string")
    override = value.get("override") or {}
    if not isinstance(override, Mapping):
        problems.append(f"{_DISCOVER}.override: {override!r} is not an object (expected e.g. {{serviceCidrs: [...]}})")
        override = {}
    for key in sorted(set(override) - set(_OVERRIDE_KEYS)):
        problems.append(f"{_DISCOVER}.override.{key}: unknown key (accepted: {', '.join(sorted(_OVERRIDE_KEYS))})")
    if problems:
        raise SettingsError(problems)
    return Discover(
        cloud=cloud,
        name=value["name"],
        region=value.get("region"),
        location=value.get("location"),
        project=value.get("project"),
        resource_group=value.get("resourceGroup"),
        override={_OVERRIDE_KEYS[k]: v for k, v in override.items()},
    )


def settings_from_config(config: pulumi.Config | None = None) -> Settings:
    """This cluster stack's settings: its `proxy-component:` keys on top of the installation layer it names."""
    return parse_settings(layered_from_config(config).data)


def layered_from_config(config: pulumi.Config | None = None) -> Layered:
    """Read `proxy-component:{proxy,cluster,deployment,namespaces,...}` and merge them onto the installation layer
    (`installationStack` or `installation`) by the rules of `layers`; any other key in the namespace is an error."""
    config = config or pulumi.Config(CONFIG_NAMESPACE)
    known = {f"{CONFIG_NAMESPACE}:{k}" for k in (*SETTINGS_KEYS, *PROVIDER_KEYS, DISCOVER_KEY, *LAYER_KEYS)}
    present = {*get_config_env(), *CONFIG.get()}
    unknown = sorted(k for k in present if k.startswith(f"{CONFIG_NAMESPACE}:") and k not in known)
    if unknown:
        accepted = ", ".join(sorted(known))
        raise SettingsError([f"{key}: unknown stack config key (accepted: {accepted})" for key in unknown])
    data: dict[str, Any] = {}
    for key in SETTINGS_KEYS:
        value = _config_object(config, key)
        if value is not None:
            data[key] = value
    data = with_project_config(data, project_config(_project_file(), SETTINGS_KEYS), f"stack {pulumi.get_stack()}")
    if _layer(config) == INSTALLATION:
        return Layered(data)
    installation = installation_layer(
        _config_object(config, INSTALLATION_KEY), config.get(INSTALLATION_STACK_KEY) or None, read_stack_outputs
    )
    return merge_layers(installation, Layer(CLUSTER, f"stack {pulumi.get_stack()}", data))


def _config_object(config: pulumi.Config, key: str) -> Any:
    """A config value as JSON; one that is not JSON is an error naming the key only (the SDK's own error prints
    the value, which may be a credentialed URL set without --path)."""
    try:
        return config.get_object(key)
    except pulumi.ConfigTypeError:
        raise SettingsError(
            [
                f"{CONFIG_NAMESPACE}:{key}: is not JSON (value hidden: it may hold a credential; expected settings "
                f"set with --path, e.g. pulumi config set --secret --path '{CONFIG_NAMESPACE}:proxy.upstream.url' "
                "http://user:password@proxy.corp:3128)"
            ]
        ) from None


def _project_file() -> Any:
    """This program's Pulumi.yaml, parsed: its project-level config is merged under the stack's."""
    root = Path(pulumi.runtime.get_root_directory() or ".")
    for name in ("Pulumi.yaml", "Pulumi.yml"):
        if (root / name).is_file():
            return yaml.safe_load((root / name).read_text()) or {}
    return {}


def _layer(config: pulumi.Config) -> str:
    layer = config.get(LAYER_KEY) or CLUSTER
    if layer not in (CLUSTER, INSTALLATION):
        raise SettingsError(
            [f"{CONFIG_NAMESPACE}:{LAYER_KEY}: {layer!r} is not a layer (expected {CLUSTER} or {INSTALLATION})"]
        )
    return layer


def installation_main() -> None:
    """The installation stack: its settings checked and exported as one secret output; no object of its own."""
    config = pulumi.Config(CONFIG_NAMESPACE)
    data = layered_from_config(config).data
    check_installation(data, f"stack {pulumi.get_stack()}")
    for line in parse_settings(data).warnings:
        pulumi.log.warn(line)
    pulumi.export(OUTPUT, pulumi.Output.secret(data))


def _secret_key(key: str) -> pulumi.Output[str] | None:
    """A kubeconfig from stack config, secret whether or not it was set with --secret; None when empty."""
    raw = get_config(f"{CONFIG_NAMESPACE}:{key}")
    return pulumi.Output.secret(raw) if raw else None


def default_provider_name() -> str:
    """The name Pulumi gives the default Kubernetes provider of this SDK version (e.g. `default_4_32_0`)."""
    from importlib.metadata import version

    return "default_" + version("pulumi-kubernetes").replace(".", "_").replace("-", "_")


def _provider(config: pulumi.Config, live: LiveDaemonSet | None = None) -> k8s.Provider:
    """The stack's one explicit provider, whatever the config: turning a key on or off never moves the objects.

    ConfigMaps and Secrets are mutable through it: otherwise pulumi-kubernetes replaces one whose data changes,
    which deletes the live object (its name is fixed) and recreates it, on every setting change.

    Pulumi.yaml gives the keys an empty default (so no stack must set them): empty means unset, and the
    provider then reads the ambient kubeconfig as the default provider would. Stacks made before 0.2 without
    any of these keys used the default provider: the alias makes this provider that one (for this SDK's
    version), so on every CLI the objects keep their provider instead of being replaced.

    An empty `renderYamlToDirectory` is the same for pulumi-kubernetes whether it is sent as `""` or not at all
    (apply to the cluster), but its provider diff replaces the provider, so every object, when the spelling
    changes: stacks made when Pulumi.yaml required the key (a592121) recorded `""`, later ones nothing. So when
    the key is empty and this stack's DaemonSet is live in the cluster, applied by pulumi-kubernetes (`live`:
    the stack was applying, whatever its recorded spelling), the recorded spelling is kept (`ignoreChanges`).
    A stack that rendered to a directory has no such DaemonSet, so emptying the key still switches it to
    applying, which replaces the provider and creates every object.
    """
    adopt = config.get_bool("adoptExisting") or None
    render_dir = config.get("renderYamlToDirectory") or None
    keep_spelling = render_dir is None and live is not None and live.applied_by_pulumi
    return k8s.Provider(
        "cluster",
        render_yaml_to_directory=render_dir,
        kubeconfig=_secret_key("kubeconfig"),
        context=config.get("context") or None,
        # Take over objects that already exist (e.g. kube-system/http-proxy from the runbook) instead of failing
        # with AlreadyExists: pulumi-kubernetes >= 4.29 creates with a client-side create unless told to upsert.
        upsert_existing_objects=adopt,
        enable_config_map_mutable=True,
        enable_secret_mutable=True,
        opts=pulumi.ResourceOptions(
            aliases=[pulumi.Alias(name=default_provider_name())],
            ignore_changes=["renderYamlToDirectory"] if keep_spelling else None,
        ),
    )


def _management_provider(config: pulumi.Config, settings: Settings) -> k8s.Provider | None:
    """The Cluster API management cluster's provider, for the `capi` Secrets; never the workload cluster's own."""
    if not settings.capi.enabled:
        return None
    kubeconfig = _secret_key("managementKubeconfig")
    context = config.get("managementContext") or None
    render_dir = config.get("renderYamlToDirectory") or None
    management_dir = None
    if kubeconfig is None and context is None:
        if render_dir is None:
            raise SettingsError(
                [
                    f"{CONFIG_NAMESPACE}:capi: the Cluster API Secrets belong in the management cluster, which this "
                    f"stack does not name (expected {CONFIG_NAMESPACE}:managementKubeconfig or "
                    f"{CONFIG_NAMESPACE}:managementContext, or capi.enabled: false)"
                ]
            )
        management_dir = f"{render_dir.rstrip('/')}/management"
    return k8s.Provider(
        "management",
        render_yaml_to_directory=management_dir,
        kubeconfig=kubeconfig,
        context=context,
        enable_config_map_mutable=True,
        enable_secret_mutable=True,
    )


def component_options(
    settings: Settings, provider: k8s.Provider, live: LiveDaemonSet | None = None
) -> pulumi.ResourceOptions:
    """The component's options: the stack's provider, an alias for the name it had before 0.2, and in a preview
    of a DaemonSet still owned by a client-side create the probes it cannot dry-run (`preview_probes`).

    The component is named after the stack whatever the settings, so that setting `cluster.name` (which
    `capi.enabled` requires) renames nothing. Stacks that set `cluster.name` before then named it so:
    the alias (which Pulumi extends to every child named after it) keeps their objects.
    """
    aliases: list[pulumi.Input[str] | pulumi.Alias] = []
    if settings.cluster.name is not None and settings.cluster.name != pulumi.get_stack():
        aliases.append(pulumi.Alias(name=settings.cluster.name))
    transform = preview_probes(live) if live is not None and pulumi.runtime.is_dry_run() else None
    return pulumi.ResourceOptions(
        providers=[provider], aliases=aliases or None, transforms=[transform] if transform is not None else None
    )


# The field managers of pulumi-kubernetes' client-side create and update, which its first server-side update moves
# to its own apply manager (pkg/await/await.go, fixCSAFieldManagers; only in `up`, never in a preview).
CSA_MANAGERS = frozenset({"pulumi-kubernetes", "pulumi-kubernetes.exe", "pulumi-resource-kubernetes"})
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


@dataclass(frozen=True)
class LiveDaemonSet:
    """What the stack program reads of its live DaemonSet before registering anything (`read_live_daemonset`)."""

    namespace: str
    name: str
    managers: frozenset[str]  # every field manager's name
    # (container, probe) -> the probe handlers pulumi-kubernetes' client-side create or update owns
    csa_handlers: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    @property
    def applied_by_pulumi(self) -> bool:
        return any(m in CSA_MANAGERS or m.startswith("pulumi-kubernetes") for m in self.managers)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> LiveDaemonSet:
        """From the DaemonSet as the API server returns it (camelCase, `metadata.managedFields`)."""
        metadata = obj.get("metadata") or {}
        entries = metadata.get("managedFields") or []
        handlers: dict[tuple[str, str], set[str]] = {}
        for entry in entries:
            if entry.get("operation") != "Update" or entry.get("manager") not in CSA_MANAGERS:
                continue
            owned = entry.get("fieldsV1") or {}
            for key in ("f:spec", "f:template", "f:spec", "f:containers"):
                owned = owned.get(key) or {} if isinstance(owned, Mapping) else {}
            for item, fields in owned.items() if isinstance(owned, Mapping) else ():
                if not item.startswith("k:") or not isinstance(fields, Mapping):
                    continue
                try:
                    container = json.loads(item[2:]).get("name")
                except (ValueError, AttributeError):
                    continue
                for probe in PROBES:
                    probe_fields = fields.get(f"f:{probe}")
                    if isinstance(probe_fields, Mapping):
                        found = {h for h in HANDLERS if f"f:{h}" in probe_fields}
                        if found:
                            handlers.setdefault((str(container), probe), set()).update(found)
        return cls(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            managers=frozenset(str(e.get("manager", "")) for e in entries),
            csa_handlers={key: frozenset(value) for key, value in handlers.items()},
        )

    def stale_probes(self, containers: Any) -> list[tuple[str, str, str]]:
        """(container, probe, handler) for each probe whose rendered handler is not the one a client-side create
        owns: a server-side apply cannot drop that field (another manager's), so its dry run holds both handlers
        and the API server refuses it ("may not specify more than 1 handler type")."""
        stale = []
        for container in containers if isinstance(containers, list) else []:
            if not isinstance(container, Mapping):
                continue
            for probe in PROBES:
                rendered = container.get(probe)
                owned = self.csa_handlers.get((str(container.get("name")), probe), frozenset())
                wanted = {h for h in HANDLERS if isinstance(rendered, Mapping) and h in rendered}
                stale += [(str(container.get("name")), probe, h) for h in sorted(owned - wanted)]
        return stale


def preview_probes(live: LiveDaemonSet) -> pulumi.ResourceTransform | None:
    """For a preview: the DaemonSet's probes whose handler changes from one a client-side create owns become
    unknown, so pulumi-kubernetes shows the update without its dry run, which the API server refuses while the old
    handler's owner is not yet moved. `up` applies the known probes: pulumi-kubernetes moves the field managers
    first, so the old handler goes. None when no probe is stale."""
    if not live.csa_handlers:
        return None
    unknown = _unknown()

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != "kubernetes:apps/v1:DaemonSet":
            return None
        props: dict[str, Any] = dict(args.props)
        metadata = props.get("metadata") or {}
        if (metadata.get("namespace"), metadata.get("name")) != (live.namespace, live.name):
            return None
        spec = props.get("spec")
        template = spec.get("template") if isinstance(spec, Mapping) else None
        pod_spec = template.get("spec") if isinstance(template, Mapping) else None
        containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
        stale = live.stale_probes(containers)
        if not (stale and isinstance(spec, Mapping) and isinstance(template, Mapping)):
            return None
        if not (isinstance(pod_spec, Mapping) and isinstance(containers, list)):
            return None  # never: stale_probes found probes in them
        # Copies along the path only: the rest may hold Outputs (secrets), which cannot be deep-copied.
        containers = [
            {**c, **{probe: unknown for name, probe, _ in stale if c.get("name") == name}}
            if isinstance(c, Mapping)
            else c
            for c in containers
        ]
        spec = {**spec, "template": {**template, "spec": {**pod_spec, "containers": containers}}}
        pulumi.log.info(
            f"DaemonSet {live.namespace}/{live.name}: "
            + ", ".join(f"container {c}'s {p} moves from {h}" for c, p, h in stale)
            + ", a field pulumi-kubernetes' client-side create owns: the API server cannot dry-run that change "
            "until `up` moves the field's owner, so the preview shows the probes as unknown; `up` applies them"
        )
        props["spec"] = spec
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform


def _unknown() -> pulumi.Output[Any]:
    """An Output whose value is unknown (in a preview, as a value another resource computes would be)."""

    async def resolved(value: Any) -> Any:
        return value

    return pulumi.Output(set(), resolved(None), resolved(False))


# pulumi-language-python's exit code for "the program stopped after the error was shown": the host adds nothing.
ALREADY_REPORTED = 32


def stop_quietly(signum: int, frame: Any) -> None:
    """SIGINT: the engine stops the program when a step fails (the API server refused an object) or on Ctrl-C, and
    has said why. Python's default would raise KeyboardInterrupt wherever the program waits and print its
    traceback (twice: the SDK's exec script is interrupted again while it shuts its threads down)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(ALREADY_REPORTED)


def main() -> ClusterProxy | None:
    """Run the stack; a settings error stops `pulumi up` with the same field-naming message as the command.

    `pulumi.RunError` is the SDK's way to fail a program with a message alone: anything else
    prints "Program failed with an unhandled exception" and a Python stack trace. A failed step
    stops the program with SIGINT, which ends it without a trace (`stop_quietly`).
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, stop_quietly)
    try:
        if _layer(pulumi.Config(CONFIG_NAMESPACE)) == INSTALLATION:
            installation_main()
            return None
        return _main()
    except SettingsError as exc:
        raise pulumi.RunError(str(exc)) from None


@contextlib.contextmanager
def _kube_client(kubeconfig: str | None, context: str | None) -> Iterator[tuple[Any, list[str]]]:
    """An API client for the cluster the stack targets, and the problems of its target (a context the kubeconfig
    does not hold); the client is None when there is no usable kubeconfig (the engine then reports on the objects
    whatever it finds) or the context is wrong. The `kubernetes` client is a dependency: an install without it is
    broken, and the program refuses to plan rather than plan without reading what an earlier layout named."""
    try:
        from kubernetes import config as kubeconfig_loader
    except ImportError:
        raise pulumi.RunError(
            "the kubernetes package, a dependency of proxy-component, is missing from the program's environment, so "
            "the stack program cannot read the cluster before planning (an earlier layout's objects could be planned "
            "as replaced): reinstall with `pip install -U proxy-component`, then run the preview again"
        ) from None
    with kubeconfig_path(kubeconfig) as path:
        where = (
            "the kubeconfig of proxy-component:kubeconfig"
            if kubeconfig is not None
            else f"the ambient kubeconfig ({os.environ.get('KUBECONFIG') or '~/.kube/config'})"
        )
        try:
            contexts, _ = kubeconfig_loader.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
        except Exception:  # no usable kubeconfig: the engine says so on the objects
            yield None, []
            return
        names = (str(c.get("name")) for c in contexts or [] if isinstance(c, dict))
        problems = context_problems(names, context, where)
        if problems:
            yield None, problems
            return
        try:
            api = kubeconfig_loader.new_client_from_config(config_file=path, context=context)  # type: ignore[no-untyped-call]
        except Exception:  # no usable kubeconfig: the engine says so on the objects
            yield None, []
            return
        yield api, []


def read_live_daemonset(settings: Settings, api: Any) -> LiveDaemonSet | None:
    """The proxy's DaemonSet as the cluster holds it now, for what its field managers say (`LiveDaemonSet`); None
    when it does not exist (404) or there is no usable kubeconfig (the engine then reports on the objects).

    Any other failure (forbidden, unreachable, a timeout) refuses to plan: without the read, a stack made by an
    earlier layout could be planned with its provider and objects replaced (docs/guides/upgrades.md)."""
    if api is None:
        return None
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    deployment = settings.deployment
    where = f"DaemonSet {deployment.namespace}/{deployment.service_name} from {redact_url(str(api.configuration.host))}"
    try:
        response: Any = client.AppsV1Api(api).read_namespaced_daemon_set(
            deployment.service_name, deployment.namespace, _request_timeout=10, _preload_content=False
        )  # the raw response: managedFields as the API server spells them
        data = json.loads(response.data)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise pulumi.RunError(
            f"the stack program could not read the {where} ({exc.status} {exc.reason}), which it reads before "
            "planning so that an upgrade replaces nothing: give the stack's credentials `get` on daemonsets in "
            f"{deployment.namespace!r} (docs/guides/upgrades.md), then run the preview again"
        ) from None
    except Exception as exc:  # unreachable, a timeout, an answer that is not JSON
        raise pulumi.RunError(
            f"the stack program could not read the {where} ({type(exc).__name__}), which it reads before planning "
            "so that an upgrade replaces nothing: check proxy-component:kubeconfig and proxy-component:context (or "
            "the ambient kubeconfig) and that the API server answers, then run the preview again"
        ) from None
    return LiveDaemonSet.from_object(data) if isinstance(data, Mapping) else None


def _read_cluster(config: pulumi.Config) -> tuple[Settings, LiveDaemonSet | None, Adopting | None]:
    """The settings, checked against the cluster the stack targets before anything is planned, and its live
    DaemonSet: every mistake a preview can see (the settings', the context's, the cluster's) in one error.

    `cluster.kubernetesVersion` left unset is the API server's own (said in the engine's log), so what depends on it
    (the Service's `trafficDistribution: PreferSameNode`, the admission API's version) follows the cluster."""
    data = layered_from_config(config).data
    kubeconfig = get_config(f"{CONFIG_NAMESPACE}:kubeconfig") or None
    with _kube_client(kubeconfig, config.get("context") or None) as (api, problems):
        cluster = data.get("cluster")
        if api is not None and isinstance(cluster, Mapping) and not cluster.get("kubernetesVersion"):
            version = live_kubernetes_version(api)
            if version is not None:
                data = {**data, "cluster": {**cluster, "kubernetesVersion": version}}
                pulumi.log.info(f"cluster.kubernetesVersion: {version}, the API server's (unset in the settings)")
        try:
            settings = parse_settings(data)
        except SettingsError as exc:
            raise SettingsError([*exc.problems, *problems]) from None
        adopting = None
        if api is not None:
            problems = [*problems, *cluster_problems(settings, api)]
            adopting, refused = read_adoption(config, settings, api)
            problems += refused
        if problems:
            raise SettingsError(problems)
        return settings, read_live_daemonset(settings, api), adopting


@dataclass
class Adopting:
    """The objects the stack imports (`imports`: each with Pulumi's `import` option) and, of those, the ones it takes
    from nobody or from `adoptFrom` (`taken`: kubectl's fields handed over in `up`, and what the preview says)."""

    api: Any
    imports: list[Existing]
    taken: list[Existing]
    planned: Mapping[tuple[str, str | None, str], Mapping[str, Any]]

    def _planned(self, item: Existing) -> Mapping[str, Any]:
        return self.planned[(item.kind, item.namespace, item.name)]

    def prepare(self) -> None:
        """Say what stays behind; in `up`, hand kubectl's fields over before the import (a preview changes nothing).
        What each import's update removes and whether it rolls the pods is said once its inputs are known
        (`transform`)."""
        for item in self.taken:
            kept = [
                f"{manager}'s {', '.join(paths)}"
                for manager, paths in fields_not_set(item, self._planned(item)).items()
                if not is_kubectl(manager)
            ]
            if kept:
                pulumi.log.warn(
                    f"{item.label}: left behind, fields of other field managers that the plan does not set (nothing "
                    f"removes them): {'; '.join(kept)}"
                )
            if item.kind == "DaemonSet":
                for kind, name in left_behind_objects(item, self._planned(item)):
                    pulumi.log.warn(
                        f"{item.label}: left behind, {kind} {item.namespace}/{name}, which the live DaemonSet uses and "
                        f"the stack's does not: nothing deletes it; once `pulumi up` has rolled the proxy, run "
                        f"`kubectl -n {item.namespace} delete {kind.lower()} {name}`"
                    )
            if not pulumi.runtime.is_dry_run():
                try:
                    hand_over(item, self.api)
                except Exception as exc:
                    raise pulumi.RunError(
                        f"{item.label}: could not hand kubectl's fields to Pulumi before the import "
                        f"({status_message(exc) if item.kind != 'Secret' else getattr(exc, 'status', '')}): give the "
                        "stack's credentials `patch` on it, or run `pulumi up` again if it changed meanwhile"
                    ) from None

    def transform(self, args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        """Pulumi's `import` for each adopted object, and for each one taken, once its inputs are known, what the
        import's update removes and (the DaemonSet) whether it rolls the pods (`_judge`)."""
        metadata = args.props.get("metadata")
        if not isinstance(metadata, Mapping):
            return None
        kind = args.type_.rsplit(":", 1)[-1]
        item = next(
            (
                i
                for i in self.imports
                if i.kind == kind and i.name == metadata.get("name") and i.namespace == metadata.get("namespace")
            ),
            None,
        )
        if item is None:
            return None
        if item in self.taken:
            pulumi.Output.from_input(dict(args.props)).apply(lambda props: self._judge(item, props))
        opts = pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(import_=item.import_id))
        return pulumi.ResourceTransformResult(props=args.props, opts=opts)

    def _judge(self, item: Existing, props: Mapping[str, Any]) -> None:
        """A server-side dry run of the stack's object replacing the live one (what the import's update leaves once
        kubectl's fields are handed over): kubectl's fields it no longer holds are removed, and a DaemonSet whose pod
        template differs rolls. A Secret is judged from the plan alone: its values never go to a dry run here."""
        made_by = ", ".join(item.managers) or "no field manager"
        line = f"{item.label}: imported (made by {made_by}); the update after the import applies the plan"
        after: Mapping[str, Any] | None = None
        if item.kind == "Secret":
            planned = dict(self._planned(item))
            # pulumi-kubernetes writes stringData as data: the keys are what counts, never the values.
            keys = {**(planned.get("data") or {}), **(planned.pop("stringData", None) or {})}
            planned["data"] = dict.fromkeys(keys, "")
            removed = [p for m, paths in fields_not_set(item, planned).items() if is_kubectl(m) for p in paths]
        else:
            # Pulumi resolves every number as a float; the API server wants its int32 fields as integers.
            body = integral({"apiVersion": item.api_version, "kind": item.kind, **props})
            try:
                after = request(
                    self.api, "PUT", object_path(item.api_version, item.kind, item.namespace, item.name),
                    query=[("dryRun", "All"), ("fieldManager", "proxy-component-adopt")], body=body,
                )  # fmt: skip
            except Exception as exc:
                pulumi.log.warn(f"{item.label}: could not dry-run the import's update ({status_message(exc)})")
                return
            removed = kubectl_fields_missing(item, after)
        if removed:
            line += f" and removes what kubectl set that the plan does not: {', '.join(removed)}"
        pulumi.log.info(line)
        if item.kind != "DaemonSet" or after is None:
            return
        before = (item.obj.get("spec") or {}).get("template")
        changes = template_changes(before, (after.get("spec") or {}).get("template"))
        if not changes:
            pulumi.log.info(f"{item.label}: its pod template does not change: no proxy pod restarts")
            return
        strategy = ((after.get("spec") or {}).get("updateStrategy") or {}).get("type", "RollingUpdate")
        shown = ", ".join(changes[:8]) + (f" and {len(changes) - 8} more" if len(changes) > 8 else "")
        pulumi.log.warn(
            f"{item.label}: the import's update changes its pod template ({shown}), so the proxy's pods roll once, "
            + (
                "node by node (updateStrategy RollingUpdate), each node's new pod ready before the next"
                if strategy == "RollingUpdate"
                else f"as updateStrategy {strategy} says"
            )
        )


def integral(value: Any) -> Any:
    """`value` with every float that is a whole number as an int (ports, counts), at any depth."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral(item) for item in value]
    return value


def read_adoption(config: pulumi.Config, settings: Settings, api: Any) -> tuple[Adopting | None, list[str]]:
    """Which of the plan's objects already exist and what the stack does with each (`decide`): the objects to import,
    and the refusals (another owner's object, or an existing one without `adoptExisting`)."""
    try:
        planned = [p for p in plain_plan(settings, checked=False) if p.cluster == "workload"]
    except SettingsError:
        return None, []
    existing = read_existing(planned, api)
    if not existing:
        return None, []
    me = stack_identity()

    def deployed() -> bool:
        try:
            return read_stack_outputs(pulumi.get_stack()) is not None
        except Exception:  # cannot tell: an object a Pulumi program made counts as this stack's own
            return True

    pulumi_made = any((o := e.owner()) is not None and o[0].startswith("pulumi-kubernetes") for e in existing)
    where = redact_url(str(api.configuration.host))
    adoption = decide(
        existing,
        me,
        bool(config.get_bool("adoptExisting")),
        config.get("adoptFrom") or None,
        deployed() if pulumi_made else False,
        where,
    )
    by_key = {
        (str(p.obj["kind"]), p.obj["metadata"].get("namespace"), str(p.obj["metadata"]["name"])): p.obj for p in planned
    }
    problems = list(adoption.problems)
    for item in adoption.taken:
        if item.kind != "DaemonSet":
            continue
        live_selector = (item.obj.get("spec") or {}).get("selector")
        planned_selector = (by_key[(item.kind, item.namespace, item.name)].get("spec") or {}).get("selector")
        if live_selector != planned_selector:
            problems.append(
                f"{item.label}: its selector {json.dumps(live_selector)} is not the stack's "
                f"{json.dumps(planned_selector)}, and a DaemonSet's selector cannot change, so the import would "
                f"replace it and stop every node's proxy at once: delete it first (`kubectl -n {item.namespace} "
                f"delete daemonset {item.name}`; each node is without its proxy until the stack's pod is ready), "
                "then run `pulumi up`"
            )
    return Adopting(api, adoption.imports, adoption.taken, by_key), problems


def _main() -> ClusterProxy:
    config = pulumi.Config(CONFIG_NAMESPACE)
    live = None
    adopting = None
    if config.get("renderYamlToDirectory"):
        settings = settings_from_config(config)
    else:
        settings, live, adopting = _read_cluster(config)
    discover = discover_from_config(config.get_object(DISCOVER_KEY))
    network = discover.network() if discover is not None else None
    provider = _provider(config, live)
    management = _management_provider(config, settings)
    args = ClusterProxyArgs(settings=settings, network=network, management_provider=management)
    options = component_options(settings, provider, live)
    if adopting is not None and adopting.imports:
        adopting.prepare()
        options = pulumi.ResourceOptions.merge(options, pulumi.ResourceOptions(transforms=[adopting.transform]))
    proxy = ClusterProxy(pulumi.get_stack(), args, options)
    pulumi.export("noProxy", proxy.no_proxy)
    pulumi.export("httpProxy", proxy.http_proxy)
    pulumi.export("httpsProxy", proxy.https_proxy)
    pulumi.export("proxyUrl", proxy.proxy_url)
    pulumi.export("env", proxy.env)
    return proxy
