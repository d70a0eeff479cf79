"""Installation-wide settings shared by a fleet's cluster stacks, merged with each cluster's own by fixed rules.

Seed 001 splits the settings in two: what the whole installation shares (the corporate upstream and its
credentials, the corporate CA, the corporate registry and ranges in NO_PROXY) and what one cluster has (its
ranges, its domain, its name). The rules, one for every key, so that nothing is ever silently replaced:

- `cluster` belongs to each cluster: the installation may not set any of it;
- lists are concatenated, the installation's entries first, an entry both give kept once;
- objects are merged key by key, by these same rules;
- any other value (a string, a number, a boolean) belongs to the one layer that sets it: set by both with
  different values, it is an error naming both sources, never an override.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .settings import Settings, SettingsError

__all__ = [
    "CLUSTER",
    "CLUSTER_ONLY",
    "INSTALLATION",
    "INSTALLATION_KEY",
    "INSTALLATION_STACK_KEY",
    "LAYER_KEY",
    "LAYER_KEYS",
    "OUTPUT",
    "ClusterTarget",
    "Layer",
    "Layered",
    "check_installation",
    "installation_layer",
    "merge_layers",
    "project_config",
    "with_project_config",
]

NAMESPACE = "proxy-component"
"""The stack config's namespace (`proxy-component:...`), as the stack program reads it."""
INSTALLATION = "installation"
CLUSTER = "cluster"
CLUSTER_ONLY = ("cluster",)
"""Top-level keys only a cluster may set: its network, domain and name."""
_ONE_OR_MANY = ("proxy.upstream.trustedCa",)
"""Keys that take one value or a list of them: merged as lists."""


@dataclass(frozen=True)
class Layer:
    """One layer's settings, as the YAML file spells them, and where they were read (named in errors)."""

    name: str
    source: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class ClusterTarget:
    """The cluster a stack's provider targets: `proxy-component:kubeconfig` (a path, relative to the project, or
    the file's contents) and `proxy-component:context`, each None when the stack leaves it to the ambient
    kubeconfig, as the provider does. `management` is the Cluster API management cluster's (`managementKubeconfig`,
    `managementContext`)."""

    stack: str
    kubeconfig: str | None = field(default=None, repr=False)  # the contents may hold a token
    context: str | None = None
    management_kubeconfig: str | None = field(default=None, repr=False)
    management_context: str | None = None


@dataclass(frozen=True)
class Layered:
    """The merged settings, and for each value the layer it came from, keyed by the field path errors use; for a
    stack's, the cluster its provider targets."""

    data: dict[str, Any]
    layers: dict[str, str] = field(default_factory=dict)
    target: ClusterTarget | None = None

    def layer_of(self, path: str) -> str | None:
        """The layer that gave a field path (`proxy.noProxy[3]`), or of its nearest parent that one layer gave."""
        while path:
            if path in self.layers:
                return self.layers[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return None


def merge_layers(installation: Layer | None, cluster: Layer, *, cluster_only: bool = True) -> Layered:
    """The cluster's settings on top of the installation's, by the module's rules; every conflict in one error.

    `cluster_only=False` merges two parts of one cluster's settings (a project's config under its stack's), where
    the lower one may set `cluster` too.
    """
    if installation is None or not installation.data:
        return Layered(dict(cluster.data), _paths(cluster.data, "", cluster.name))
    if not isinstance(installation.data, Mapping):
        raise SettingsError([f"{installation.source}: {type(installation.data).__name__} is not an object of settings"])
    problems = _cluster_only(installation.data, installation.source) if cluster_only else []
    layers: dict[str, str] = {}
    merged = _merge(dict(installation.data), dict(cluster.data), "", installation, cluster, layers, problems)
    if problems:
        raise SettingsError(problems)
    return Layered(merged, layers)


def _merge(
    below: Any, above: Any, path: str, low: Layer, high: Layer, layers: dict[str, str], problems: list[str]
) -> Any:
    if isinstance(below, Mapping) and isinstance(above, Mapping):
        out: dict[str, Any] = {}
        for key in [*below, *(k for k in above if k not in below)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in above:
                out[key] = below[key]
                layers.update(_paths(below[key], where, low.name))
            elif key not in below:
                out[key] = above[key]
                layers.update(_paths(above[key], where, high.name))
            else:
                out[key] = _merge(below[key], above[key], where, low, high, layers, problems)
        return out
    if path in _ONE_OR_MANY:
        below, above = _as_list(below), _as_list(above)
    if isinstance(below, list) and isinstance(above, list):
        out_list = list(below)
        layers.update(_paths(below, path, low.name))
        for item in above:
            if item not in out_list:
                layers.update(_paths(item, f"{path}[{len(out_list)}]", high.name))
                out_list.append(item)
        return out_list
    if below == above and type(below) is type(above):
        layers[path] = f"{low.name}, {high.name}"
        return below
    problems.append(
        f"{path}: set by the {low.name} ({low.source}) and by this {high.name} ({high.source}); "
        f"it belongs to one layer: remove it from one of them"
    )
    return below


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _paths(value: Any, path: str, layer: str) -> dict[str, str]:
    """Every field path under `path` (itself included) attributed to `layer`."""
    out = {path: layer} if path else {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            out.update(_paths(item, f"{path}.{key}" if path else str(key), layer))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.update(_paths(item, f"{path}[{i}]", layer))
    return out


# --- the stack config's keys for the layers ------------------------------------------------------------

LAYER_KEY = "layer"
"""`proxy-component:layer`: `cluster` (the default: a cluster's stack) or `installation` (the fleet's stack)."""
INSTALLATION_STACK_KEY = "installationStack"
"""`proxy-component:installationStack`: the installation stack a cluster stack reads (`fleet`, or org/project/fleet)."""
INSTALLATION_KEY = "installation"
"""`proxy-component:installation`: the installation layer inline, e.g. from a Pulumi ESC environment."""
OUTPUT = "installation"
"""The installation stack's secret output holding its settings."""
LAYER_KEYS = (LAYER_KEY, INSTALLATION_STACK_KEY, INSTALLATION_KEY)


def installation_layer(
    inline: Any, stack_name: str | None, read_outputs: Any, namespace: str | None = NAMESPACE
) -> Layer | None:
    """The installation layer a cluster names: inline, or the `installation` output of an installation stack.

    `read_outputs(name)` returns that stack's outputs, secrets decrypted; a missing output (a stack never updated
    as an installation, or whose secrets this stack cannot decrypt) is an error, never an empty layer. Errors name
    the stack config keys (`proxy-component:installation`), or with `namespace=None` ClusterProxy's inputs
    (`installation`, `installationStack`).
    """
    inline_key = f"{namespace}:{INSTALLATION_KEY}" if namespace else INSTALLATION_KEY
    stack_key = f"{namespace}:{INSTALLATION_STACK_KEY}" if namespace else INSTALLATION_STACK_KEY
    if inline is not None and stack_name:
        raise SettingsError([f"{inline_key} and {stack_key}: both set; the installation layer comes from one of them"])
    if stack_name:
        if not isinstance(stack_name, str):
            raise SettingsError(
                [
                    f"{stack_key}: a {type(stack_name).__name__} is not a stack name (expected e.g. fleet or org/project/fleet)"
                ]
            )
        outputs = read_outputs(stack_name) or {}
        value = outputs.get(OUTPUT)
        if not isinstance(value, Mapping):
            raise SettingsError(
                [
                    f"{stack_key}: stack {stack_name!r} has no output {OUTPUT!r} this program can read (expected a "
                    f"stack with {NAMESPACE}:{LAYER_KEY}: {INSTALLATION}, updated with `pulumi up`, in this backend "
                    "and with the same secrets provider or passphrase; a bare name is a stack of this program's "
                    "project, another project's is org/project/stack)"
                ]
            )
        return Layer(INSTALLATION, f"stack {stack_name}", value)
    if inline is not None:
        if not isinstance(inline, Mapping):
            raise SettingsError([f"{inline_key}: {type(inline).__name__} is not an object of settings"])
        return Layer(INSTALLATION, inline_key, inline)
    return None


def check_installation(data: Mapping[str, Any], source: str) -> None:
    """An installation stack's own settings: anything but `cluster`."""
    problems = _cluster_only(data, source)
    if problems:
        raise SettingsError(problems)


def _cluster_only(data: Mapping[str, Any], source: str) -> list[str]:
    return [
        f"{key}: belongs to each cluster stack (its ranges, domain and name), not to the installation ({source}): "
        "move it to the cluster stacks' config"
        for key in CLUSTER_ONLY
        if key in data
    ]


# --- project-level config: under the stack's, by the same rules ----------------------------------------

PROJECT_SOURCE = "Pulumi.yaml config"
_DECLARATION_KEYS = {"type", "description", "default", "value", "secret", "items"}


def project_config(project: Mapping[str, Any], keys: Any, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The settings a project file's `config:` gives (`proxy-component:proxy: {value: {...}}`, a declaration's
    `default`, or a plain value), keyed as the YAML file spells them; keys other than `keys` are left out."""
    config = project.get("config") if isinstance(project, Mapping) else None
    out: dict[str, Any] = {}
    for key in keys:
        entry = config.get(f"{namespace}:{key}") if isinstance(config, Mapping) else None
        if entry is None:
            continue
        if isinstance(entry, Mapping) and entry and set(entry) <= _DECLARATION_KEYS:
            value = entry.get("value", entry.get("default"))
            if value is None:
                continue
        else:
            value = entry
        out[key] = value
    return out


def with_project_config(stack: Mapping[str, Any], project: Mapping[str, Any], stack_source: str) -> dict[str, Any]:
    """A stack's settings on top of its project's config by the layers' rules, never one replacing the other whole.

    Pulumi gives a program the stack's value of a key the stack sets, else the project's: a stack that sets one
    entry (`pulumi config set --path 'proxy-component:proxy.noProxy[0]' ...`) hides the project's whole `proxy`.
    Each key both set differently is merged here (lists joined, objects key by key); a value both set differently is
    an error naming both files.
    """
    merged = dict(stack)
    problems: list[str] = []
    for key, value in project.items():
        if key not in stack:
            merged[key] = value
            continue
        if stack[key] == value:
            continue
        try:
            layered = merge_layers(
                Layer("project", PROJECT_SOURCE, {key: value}),
                Layer("stack", stack_source, {key: stack[key]}),
                cluster_only=False,
            )
        except SettingsError as exc:
            problems += exc.problems
            continue
        merged[key] = layered.data[key]
    if problems:
        raise SettingsError(problems)
    return merged


# --- the same layers, read by the command through the Pulumi CLI ---------------------------------------


class StackReadError(SettingsError):
    """A stack's config or outputs could not be read through the Pulumi CLI: its own message, no secret."""


def read_stack(stack: str, cwd: str | None = None, pulumi: str = "pulumi") -> Layered:
    """The layered settings the stack program of `stack` reads: its config (both layers, as `pulumi config` resolves
    it, ESC environments included) in the project directory `cwd`, decrypted with the stack's own secrets provider
    or passphrase, and the installation layer it names; the same merge as the program's.

    Nothing read is printed: a failing `pulumi` command is reported by its exit status and its first error line
    with every config value masked.
    """
    config = _pulumi_json([pulumi, "config", "--json", "--show-secrets", "--stack", stack], cwd)
    values: dict[str, Any] = {}
    prefix = f"{NAMESPACE}:"
    for key, item in config.items():
        if not key.startswith(prefix) or not isinstance(item, Mapping):
            continue
        values[key[len(prefix) :]] = item["objectValue"] if "objectValue" in item else item.get("value")
    settings_keys = [info.alias or name for name, info in Settings.model_fields.items()]
    data = {key: values[key] for key in settings_keys if key in values}
    data = with_project_config(data, project_config(_project_file(cwd), settings_keys), f"stack {stack}")
    target = _target(stack, values, cwd)
    if (values.get(LAYER_KEY) or CLUSTER) == INSTALLATION:
        return Layered(data, _paths(data, "", INSTALLATION), target)

    def outputs(name: str) -> Any:
        return _pulumi_json([pulumi, "stack", "output", "--json", "--show-secrets", "--stack", name], cwd)

    inline = values.get(INSTALLATION_KEY)
    if isinstance(inline, str) and inline == "":
        inline = None
    installation = installation_layer(inline, values.get(INSTALLATION_STACK_KEY) or None, outputs)
    return replace(merge_layers(installation, Layer(CLUSTER, f"stack {stack}", data)), target=target)


def _target(stack: str, values: Mapping[str, Any], cwd: str | None) -> ClusterTarget:
    """Where the stack's provider points: its config's kubeconfig (a relative path is the program's, run in the
    project directory) and context; empty is unset (Pulumi.yaml's defaults), as for the provider."""

    def text(key: str) -> str | None:
        value = values.get(key)
        return value if isinstance(value, str) and value.strip() else None

    def path(key: str) -> str | None:
        value = text(key)
        if value is None or "\n" in value:  # unset, or the file's contents
            return value
        expanded = os.path.expanduser(value)
        return expanded if os.path.isabs(expanded) else str(Path(cwd or ".").resolve() / expanded)

    return ClusterTarget(
        stack, path("kubeconfig"), text("context"), path("managementKubeconfig"), text("managementContext")
    )


def _project_file(cwd: str | None) -> Any:
    """The Pulumi.yaml (or .yml) of the project in `cwd` or above it, parsed; {} when there is none."""
    here = Path(cwd or ".").resolve()
    for directory in (here, *here.parents):
        for name in ("Pulumi.yaml", "Pulumi.yml"):
            path = directory / name
            if path.is_file():
                try:
                    return yaml.safe_load(path.read_text()) or {}
                except yaml.YAMLError:
                    raise StackReadError([f"--stack: {path} is not YAML"]) from None
    return {}


def _pulumi_json(argv: list[str], cwd: str | None) -> Any:
    try:
        result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    except FileNotFoundError:
        raise StackReadError([f"--stack: the Pulumi CLI ({argv[0]}) is not on PATH"]) from None
    if result.returncode != 0:
        first = next((line.strip() for line in result.stderr.splitlines() if line.strip()), "no message")
        raise StackReadError([f"--stack: `{' '.join(argv[1:3])} --stack {argv[-1]}` failed: {first[:300]}"])
    try:
        return json.loads(result.stdout or "{}")
    except ValueError:
        raise StackReadError([f"--stack: `{' '.join(argv[1:3])}` printed no JSON"]) from None
