"""The `proxy-component` command: render the objects as YAML, print NO_PROXY, explain it, without a Pulumi engine."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from .dataplane.metrics import metrics_objects
from .layers import Layered, read_stack
from .noproxy import NoProxyError
from .redaction import mask_url
from .render import capi_manifests, capi_patches, manifests, plain_values, plan_checks
from .render.admission import admission_objects
from .render.helm import PROFILES, RENAMED, UnknownProfileError, profile_values, values_yaml
from .render.kustomize import kustomization
from .render.kyverno import kyverno_objects
from .render.plan import owned
from .render.trust import unreached
from .settings import (
    Check,
    Runtime,
    Settings,
    SettingsError,
    load_settings,
    parse_runtimes,
    parse_settings,
    redact_url,
    release_name,
)

FORMATS = (
    "manifests",
    "helm-values",
    "capi",
    "capi-patches",
    "kustomize-patch",
    "kyverno",
    "metrics",
    "admission",
    "check-rbac",
    "rollout-rbac",
    "egress-rbac",
)
MARKER = "# Rendered by proxy-component render: this directory is rewritten whole by each render."
PATCH_HEADER = """\
# Merge patches for your Cluster API cluster, NOT objects to apply: they hold only the proxy's part of
# KubeadmControlPlane.spec.kubeadmConfigSpec and KubeadmConfigTemplate.spec.template.spec.
# `files` and `preKubeadmCommands` are lists: `kubectl apply` or a JSON merge patch replaces them whole
# (and a changed KubeadmControlPlane rolls every control-plane node). Append the entries to the lists
# you have instead, e.g. Kustomize JSON 6902 patches with op: add at path .../files/- per entry, or let
# ClusterProxy.kubeadm_config_spec feed your own KubeadmControlPlane.
"""

__all__ = ["main"]

PROBE_WAIT = 10  # check --probe: seconds each URL may take in the pod
PROBE_DEADLINE = 120  # check --probe: seconds for the whole probe (pods scheduled, image pulled, run, logs read)

EXIT_INVALID = 2
EXIT_CRASH = 3  # check failed on a bug of its own: neither clean (0) nor findings (1)


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (tinyproxy.conf), so the rendered files read like hand-written ones."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
_Dumper.ignore_aliases = lambda self, data: True  # type: ignore[method-assign]


def dump(objects: Sequence[dict[str, Any]]) -> str:
    """A multi-document YAML stream, keys in the builders' order (apiVersion, kind, metadata, ...)."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True, default_flow_style=False)


def _load(config: str | None, args: argparse.Namespace | None = None) -> Settings:
    return _load_layered(config, args)[0]


def _load_layered(
    config: str | None, args: argparse.Namespace | None = None, checks: Sequence[Check] = ()
) -> tuple[Settings, Layered | None]:
    """The settings of CONFIG, of a stack's config (--stack: both layers, and which layer gave what), or the
    embedded example; `checks` (the plan's) report in the settings' round; the settings' warnings (each naming a
    field, never a value) on stderr."""
    stack = getattr(args, "stack", None)
    layered = None
    if stack is not None:
        if config is not None:
            raise SettingsError([f"--stack {stack} and CONFIG {config}: give one of them"])
        layered = read_stack(stack, getattr(args, "cwd", None))
        settings = parse_settings(layered.data, checks)
    else:
        settings = _load_file(config, checks)
    for line in settings.warnings:
        print(f"proxy-component: warning: {line}", file=sys.stderr)
    return settings, layered


def _load_file(config: str | None, checks: Sequence[Check] = ()) -> Settings:
    if config is None:
        text = files("proxy_component").joinpath("data/example.yaml").read_text(encoding="utf-8")
        print(
            "proxy-component: no CONFIG given, using the embedded example (examples/ipv6-only/proxy.yaml)",
            file=sys.stderr,
        )
        return parse_settings(yaml.safe_load(text), checks)
    return load_settings(config, checks)


_USER_ORIGIN = re.compile(r"\b(proxy\.noProxy\[\d+\])")


def _with_layers(line: str, layered: Layered | None) -> str:
    """An explain line whose user entries name their layer: `proxy.noProxy[3] (installation)`."""
    if layered is None:
        return line
    return _USER_ORIGIN.sub(lambda m: f"{m.group(1)} ({layered.layer_of(m.group(1)) or 'cluster'})", line)


def _print_layers(layered: Layered | None) -> None:
    """With --stack, say on stderr which layer gave each setting (paths only: a value may be a secret)."""
    if layered is None:
        return
    print("proxy-component: settings by layer (installation first, then this cluster's; lists concatenated):",
          file=sys.stderr)  # fmt: skip
    for path, layer in sorted(layered.layers.items()):
        print(f"  {path}: {layer}", file=sys.stderr)


def _file_name(index: int, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    parts = [f"{index:03d}", str(obj["kind"]).lower(), meta.get("namespace", ""), meta.get("name", "")]
    return "-".join(p for p in parts if p) + ".yaml"


def _objects(settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]]:
    fmt = args.format[0]
    if fmt == "capi":
        return capi_manifests(settings)
    if fmt == "capi-patches":
        return capi_patches(settings)
    if fmt == "kyverno":  # the plan's objects (those of injection.kyverno), made as the plan makes them
        return [owned(o) for o in kyverno_objects(settings, plain_values(settings))]
    if fmt == "admission":
        return [owned(o) for o in admission_objects(settings, plain_values(settings))]
    if fmt == "check-rbac":
        from .live.access import rbac_objects

        return rbac_objects(settings, probe=args.probe)
    if fmt == "rollout-rbac":
        from .live.access import rollout_rbac_objects

        return rollout_rbac_objects(settings, capi=args.capi)
    if fmt == "egress-rbac":
        from .live.access import egress_rbac_objects

        return egress_rbac_objects(settings)
    if fmt == "metrics":
        return [owned(o) for o in metrics_objects(settings)]
    if fmt == "kustomize-patch":
        values = plain_values(settings).select(_selection(settings, args))
        return [kustomization(settings, values, kind=args.target_kind, name=args.target_name, container=args.container)]
    return manifests(settings)


def _selection(settings: Settings, args: argparse.Namespace) -> frozenset[Runtime]:
    """--runtimes as the annotation writes it (java,node or none); default: the cluster-wide flags."""
    if args.runtimes is None:
        return settings.runtimes.cluster_wide
    return parse_runtimes(args.runtimes, "--runtimes")


def _check_format(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    fmt, *rest = args.format
    accepted = ", ".join(FORMATS)
    if fmt not in FORMATS:
        parser.error(f"--format: {fmt!r} is not a format (expected one of: {accepted})")
    if fmt == "helm-values":
        if len(rest) > 1:
            parser.error(
                f"--format helm-values: takes one profile, got {' '.join(rest)!r} (put CONFIG before --format)"
            )
        if rest and rest[0] in RENAMED:
            parser.error(UnknownProfileError(rest[0], "--format helm-values").message)
        if not rest or rest[0] not in PROFILES:
            given = repr(rest[0]) if rest else "no profile"
            parser.error(f"--format helm-values: {given} is not a profile (expected one of: {', '.join(PROFILES)})")
        if args.output is not None:
            parser.error("--format helm-values: writes the values to stdout; -o is for object formats")
        if args.release is not None:
            try:
                release_name(args.release)
            except ValueError as exc:
                parser.error(f"--release: {exc}")
    elif args.release is not None:
        parser.error(f"--release: only for --format helm-values (the chart's release name), not --format {fmt}")
    if fmt != "helm-values" and rest:
        parser.error(f"--format {fmt}: takes no argument, got {' '.join(rest)!r} (put CONFIG before --format)")
    if args.output is not None and os.path.exists(args.output) and not os.path.isdir(args.output):
        parser.error(f"-o {args.output}: exists and is not a directory")
    if args.probe and fmt != "check-rbac":
        parser.error(f"--probe: only for --format check-rbac (the role of `check --probe`), not {fmt}")
    if args.capi and fmt != "rollout-rbac":
        parser.error(f"--capi: only for --format rollout-rbac (the role of `rollout --capi`), not {fmt}")
    if fmt == "kustomize-patch" and not args.target_name:
        parser.error("--format kustomize-patch: --target-name is required (the workload to patch)")


def _render(args: argparse.Namespace) -> int:
    planned = args.format[0] in ("manifests", "capi")  # the formats that dump the plan
    settings, layered = _load_layered(args.config, args, plan_checks() if planned else ())
    _print_layers(layered)
    if args.format[0] == "helm-values":
        values = profile_values(settings, args.format[1], selection=_selection(settings, args), release=args.release)
        sys.stdout.write(values_yaml(args.format[1], values))
        return 0
    objects = _objects(settings, args)
    header = PATCH_HEADER if args.format[0] == "capi-patches" else ""
    if args.output is None:
        sys.stdout.write(header + dump(objects))
        return 0
    rendered = {_file_name(i, obj): f"{MARKER}\n{header}{dump([obj])}" for i, obj in enumerate(objects)}
    _replace_directory(args.output, rendered)
    print(f"proxy-component: wrote {len(rendered)} files to {args.output}", file=sys.stderr)
    return 0


def _replace_directory(path: str, files: dict[str, str]) -> None:
    """Make `path` hold exactly `files`: a stale file of an earlier render would be applied too.

    Only files an earlier render wrote (they start with MARKER) are removed; anything else in the
    directory is refused before a file changes.
    """
    os.makedirs(path, exist_ok=True)
    stale = []
    for entry in sorted(os.listdir(path)):
        full = os.path.join(path, entry)
        first = ""
        if os.path.isfile(full) and not os.path.islink(full):
            with open(full, encoding="utf-8", errors="replace") as handle:
                first = handle.readline().rstrip("\n")
        if first != MARKER:
            raise ValueError(
                f"-o {path}: holds {entry!r}, which proxy-component did not write; the directory must hold exactly "
                "the render (expected an empty directory, a new one, or one only earlier renders wrote)"
            )
        stale.append(full)
    for full in stale:
        os.remove(full)
    for name, text in files.items():
        with open(os.path.join(path, name), "w", encoding="utf-8") as handle:
            handle.write(text)


def _no_proxy(args: argparse.Namespace) -> int:
    print(_load(args.config, args).no_proxy())
    return 0


def _explain(args: argparse.Namespace) -> int:
    from .explain import destinations, evaluate, trust_cells, warnings
    from .render.runtimes import NO_PROXY_PYTHON, java_options, python_no_proxy

    settings, layered = _load_layered(args.config, args)
    no_proxy = settings.no_proxy()
    urls = args.url or None
    selection = _selection(settings, args)
    cells = evaluate(settings, no_proxy, urls, selection, _own_env(args.env or []))
    if args.json:
        print(json.dumps([cell.as_dict() for cell in cells], indent=2))
        return 0
    print(f"HTTP_PROXY / HTTPS_PROXY: {redact_url(settings.http_proxy)} / {redact_url(settings.https_proxy)}")
    print(f"NO_PROXY: {no_proxy}")
    print()
    print(f"{'entry (tokens)':<48} {'category':<16} origin")
    for line in no_proxy.explain():
        print(_with_layers(line, layered))
    print()
    print(
        f"{NO_PROXY_PYTHON} (no_proxy of every workload; NO_PROXY too with the python runtime): {python_no_proxy(no_proxy)}"
    )
    java = java_options(settings.http_proxy, settings.https_proxy, no_proxy)
    if java.value is None:
        print(f"JDK_JAVA_OPTIONS (java runtime): not rendered, so JVMs get no proxy: {java.skipped}")
    else:
        print(f"JDK_JAVA_OPTIONS (java runtime): {java.value}")
        for gap in java.uncovered:
            print(f"  not for Java: {gap}")
    print("NODE_USE_ENV_PROXY (node runtime): 1 (Node >= 24's http and fetch read the variables only with it)")
    runtimes = settings.runtimes
    shown = ",".join(sorted(selection)) or "none"
    print(
        f"Runtimes: this table is for workloads selecting {shown!r} (--runtimes); a workload's own is its annotation "
        f"{runtimes.annotation}, else runtimes.namespaces, else the cluster-wide flags "
        f"({','.join(sorted(runtimes.cluster_wide)) or 'none'})"
    )
    print()
    labels = {d.url: d.label for d in destinations(settings, no_proxy)}
    trust = trust_cells(settings, no_proxy, selection)
    _print_table(cells, labels, trust)
    lines = warnings(settings, no_proxy, cells)
    for number, line in enumerate(lines, 1):
        print(f"[{number}] {line}")
    sources: dict[str, list[str]] = {}
    for cell in trust:
        if cell.source:
            sources.setdefault(cell.source, []).append(cell.client)
    for source, readers in sources.items():
        print(f"TLS trust from {source}: {', '.join(readers)}")
    notes = list(dict.fromkeys(cell.warning for cell in trust if cell.warning))
    for number, note in enumerate(notes, len(lines) + 1):
        clients = ", ".join(cell.client for cell in trust if cell.warning == note)
        print(f"[{number}] {note} [{clients}; TLS trust]")
    lost = unreached(settings)
    if lost:
        print(f"[{len(lines) + len(notes) + 1}] {lost}")
    return 0


def _own_env(pairs: Sequence[str]) -> dict[str, str]:
    """`--env NAME=VALUE` arguments: variables a workload sets itself, added to the rendered environment."""
    own = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or any(ch.isspace() for ch in name):
            raise ValueError(  # masked: the value is often a proxy URL, and may hold its password
                f"--env: {mask_url(pair)!r} is not NAME=VALUE (expected e.g. ALL_PROXY=http://proxy.corp:3128)"
            )
        own[name] = value
    return own


def _print_table(cells: Sequence[Any], labels: dict[str, str], trust: Sequence[Any] = ()) -> None:
    """Rows are destinations, columns clients; a cell that differs from the intent is red, with its note's number.
    With a trusted CA, a last row says where each client takes it from (TLS trust)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    clients = list(dict.fromkeys(cell.client for cell in cells))
    notes = list(dict.fromkeys(cell.warning for cell in cells if cell.warning))
    table = Table(title="What each client does (direct / proxy / error); red: not what is intended, see \\[n]")
    table.add_column("destination", no_wrap=True)
    table.add_column("intended", min_width=8)
    for client_id in clients:
        parts = client_id.split("-")
        table.add_column("\n".join(parts), justify="center", min_width=max(6, *map(len, parts)))
    rows: dict[str, list[Any]] = {}
    for cell in cells:
        rows.setdefault(cell.url, []).append(cell)
    for url, row in rows.items():
        label = escape(f"{labels[url]}\n{url}" if url in labels else url)
        shown = [_cell_text(cell, notes) for cell in row]
        table.add_row(label, "direct" if row[0].intended == "bypass" else "proxy", *shown)
    if trust:
        by_client = {cell.client: cell for cell in trust}
        trust_notes = list(dict.fromkeys(cell.warning for cell in trust if cell.warning))
        shown = []
        for client_id in clients:
            cell = by_client[client_id]
            if cell.warning:
                shown.append(f"[bold red]no CA \\[{len(notes) + trust_notes.index(cell.warning) + 1}][/bold red]")
            else:
                shown.append(f"[green]{escape(cell.source)}[/green]")
        table.add_row("TLS trust\n(proxy.upstream.trustedCa)", "CA", *shown)
    width = 60 + 11 * (len(clients) + 1)
    console = Console(width=max(width, Console().width), highlight=False)
    console.print(table)


def _cell_text(cell: Any, notes: list[str]) -> str:
    word = {"bypass": "direct", "proxy": "proxy", "error": "ERROR"}[cell.decision]
    if not cell.warning:
        return f"[green]{word}[/green]"
    return f"[bold red]{word} \\[{notes.index(cell.warning) + 1}][/bold red]"


def _crash(what: str, exc: Exception, scrub: Callable[[str, Settings], str], settings: Settings) -> int:
    """A live command's own bug: its traceback without credentials, a line saying so, EXIT_CRASH (never 1, which
    reads as findings or something stale)."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    sys.stderr.write(scrub(trace, settings))
    print(
        f"proxy-component {what}: {type(exc).__name__} (a bug in proxy-component; please report it with the "
        "traceback above)",
        file=sys.stderr,
    )
    return EXIT_CRASH


def _connect(args: argparse.Namespace, layered: Layered | None, management: bool = False) -> Any:
    """The cluster a live command judges, said first on stderr (its server and context, and where they came from).

    With --stack, the cluster the stack's provider targets, resolved as the provider does: the stack's
    `proxy-component:kubeconfig` and `context` (`managementKubeconfig`, `managementContext` for --capi), else the
    ambient kubeconfig and its current context. --kubeconfig or --context naming something else is refused: the
    settings are that stack's, so the cluster must be too."""
    from .live import CheckError, connect  # looked up here: the tests put their own in its place
    from .live.cluster import kubeconfig_path

    kubeconfig, context, origin = (
        args.kubeconfig,
        args.context,
        "--kubeconfig/--context" if args.kubeconfig or args.context else "the ambient kubeconfig",
    )
    target = layered.target if layered is not None else None
    if target is not None:
        own = (
            (target.management_kubeconfig, target.management_context)
            if management
            else (target.kubeconfig, target.context)
        )
        keys = ("managementKubeconfig", "managementContext") if management else ("kubeconfig", "context")
        for flag, given, theirs, key in (
            ("--kubeconfig", args.kubeconfig, own[0], keys[0]),
            ("--context", args.context, own[1], keys[1]),
        ):
            if (
                given is None
                or given == theirs
                or (flag == "--kubeconfig" and theirs is not None and os.path.abspath(given) == theirs)
            ):
                continue
            shown = (
                "its contents"
                if theirs is not None and "\n" in theirs
                else repr(theirs)
                if theirs
                else "nothing (the ambient kubeconfig)"
            )
            raise CheckError(
                f"{flag} {given!r}: stack {target.stack} targets the cluster of its proxy-component:{key}, which is "
                f"{shown}: drop {flag} (or set proxy-component:{key} on the stack), so that the settings and the "
                "cluster are the same stack's"
            )
        kubeconfig, context = own
        origin = f"stack {target.stack}'s " + (
            " and ".join(f"proxy-component:{k}" for k, v in zip(keys, own, strict=True) if v)
            or "ambient kubeconfig (it sets no proxy-component:kubeconfig)"
        )
    with kubeconfig_path(kubeconfig) as path:
        cluster = connect(path, context)  # reads the file now: a scratch copy may go
    print(
        f"proxy-component {args.command}: judging the cluster at {cluster.server} (context {cluster.context or '(in-cluster)'}, "
        f"from {origin})",
        file=sys.stderr,
    )
    return cluster


def _check(args: argparse.Namespace) -> int:
    from .live import CheckError, check_cluster, probe_cluster, scrub

    settings, layered = _load_layered(args.config, args)
    probes: list[Any] = []
    previous = _interruptible()  # the probe pods are deleted on either signal
    cluster = None
    try:
        cluster = _connect(args, layered)
        findings = check_cluster(settings, cluster)
        if args.probe:
            probes = probe_cluster(settings, cluster, args.probe, wait=args.probe_timeout, deadline=args.probe_deadline)
    except CheckError as exc:
        print(f"proxy-component check: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        cluster = None  # out now, not after its requests in flight
        print(f"proxy-component check: interrupted{' (probe pods deleted)' if args.probe else ''}", file=sys.stderr)
        return 130
    except (SettingsError, NoProxyError, ValueError):
        raise
    except Exception as exc:  # a bug: exit 1 would read as findings
        return _crash("check: internal error, not a finding", exc, scrub, settings)
    finally:
        _restore(previous)
        if cluster is not None:
            cluster.settle()
    failed = [p for p in probes if not p.ok]
    if args.json:
        rows = [f.as_dict() for f in findings]
        rows += [
            {"kind": "probe", "object": f"Node {p.node}", "severity": "ok" if p.ok else "error",
             "message": f"{p.url}: {p.outcome}: {p.detail}", **p.as_dict()}
            for p in probes
        ]  # fmt: skip
        print(json.dumps(rows, indent=2))
    else:
        for finding in findings:
            print(finding)
        for probe in probes:
            print(probe)
    summary = f"{len(findings)} finding(s)" if findings else "clean"
    if args.probe:
        summary += f", {len(probes) - len(failed)} of {len(probes)} probe(s) ok"
    print(f"proxy-component check: {cluster.server}: {summary} ({cluster.requests} API requests)", file=sys.stderr)
    return 1 if findings or failed else 0


_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(parser: argparse.ArgumentParser, flag: str, value: str) -> int:
    """A duration flag (`90s`, `30m`, `2h`, `1d`, or a sum such as `1h30m`) in seconds, or an error naming it."""
    parts = _DURATION.findall(value)
    if not value or "".join(n + u for n, u in parts) != value or not sum(int(n) * _UNITS[u] for n, u in parts) > 0:
        parser.error(f"{flag}: {value!r} is not a duration (expected e.g. 30m, 2h, 1d or 1h30m)")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def _saved_logs(paths: Sequence[str]) -> list[tuple[str, Path]]:
    """(node, file) of each saved log: a file, or each regular file of a directory; the node is the file's name
    without its suffix (save each proxy pod's log as <node>.log)."""
    out: list[tuple[str, Path]] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise ValueError(f"--logs: {given!r} does not exist (expected a file or a directory of <node>.log files)")
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        out += [(file.name.split(".", 1)[0], file) for file in files]
    return out


def _streamed(saved: Sequence[tuple[str, Path]]) -> Iterator[Any]:
    """The events of each saved log, read line by line (a day of a fleet's logs is never held in memory)."""
    from .egress import events

    for node, file in saved:
        try:
            with file.open(errors="replace") as text:
                yield from events(text, node)
        except OSError as exc:
            raise ValueError(f"--logs: cannot read {str(file)!r} ({exc.strerror})") from None


def _items(path: str, flag: str, kind: str) -> list[Any]:
    """The items of a saved list (`kubectl get pods -A -o json`), or an error naming the flag and the file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{flag}: cannot read {path!r} ({exc.strerror})") from None
    except ValueError:
        raise ValueError(f"{flag}: {path!r} is not JSON (expected `kubectl get {kind} -A -o json`)") from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"{flag}: {path!r} has no items list (expected `kubectl get {kind} -A -o json`)")
    return items


def _egress(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from . import egress
    from .explain import intent, miss_verdicts, resolve_env
    from .live import CheckError, scrub

    settings = None
    layered = None
    if args.config is not None or args.stack is not None:
        settings, layered = _load_layered(args.config, args)
    since = _duration(args.parser, "--since", args.since) if args.since else None
    unread: list[str] = []
    events: Any
    if args.logs:
        saved = _saved_logs(args.logs)
        index = egress.PodIndex(
            _items(args.pods, "--pods", "pods"), _items(args.nodes, "--nodes", "nodes") if args.nodes else ()
        )
        cutoff = None
        if since is not None:  # of the newest line: a first pass
            newest = max((e.time for e in _streamed(saved) if isinstance(e, egress.Line)), default=None)
            cutoff = None if newest is None else newest - timedelta(seconds=since)
        events = _streamed(saved)
        described = f"{len(saved)} saved log(s)"
    else:
        assert settings is not None  # main() requires CONFIG or --stack without --logs
        cutoff = None
        described = ""
        events = None  # read below, as the report consumes them
    intent_of = verdicts = None
    no_proxy = None
    domain = "cluster.local"
    if settings is not None:
        no_proxy = settings.no_proxy()
        domain = settings.cluster.dns_domain
        bound: Settings = settings

        def intent_of(target: Any) -> str:
            return intent(bound, no_proxy, target)

        def verdicts(client: egress.Client, target: Any) -> list[egress.Verdict]:
            env = resolve_env(bound, no_proxy, dict(client.variables), client.env_from)
            return [egress.Verdict(c, d, why) for c, d, why in miss_verdicts(bound, no_proxy, env, target)]

    kernel: list[tuple[str, Any]] = []
    if settings is not None and settings.deployment.firewall.enabled:  # its kernel rules' refusals, by rule
        import ipaddress

        kernel = [("deny-ranges", ipaddress.ip_network(c)) for c in settings.deployment.firewall.deny_cidrs]
        kernel += [("cluster-ranges", ipaddress.ip_network(c)) for c in settings.cluster_destinations(None)]
    if events is not None:
        report = egress.report(
            events, index, domain=domain, intent=intent_of, verdicts=verdicts, since=cutoff, kernel=kernel
        )
    else:
        from .live.egress import read_egress

        assert settings is not None
        cluster = None
        try:
            cluster = _connect(args, layered)
            stream, index, unread = read_egress(settings, cluster, since)
            report = egress.report(
                stream, index, domain=domain, intent=intent_of, verdicts=verdicts, since=cutoff, kernel=kernel
            )
        except CheckError as exc:
            print(f"proxy-component egress: {exc}", file=sys.stderr)
            return EXIT_INVALID
        except (SettingsError, NoProxyError, ValueError):
            raise
        except Exception as exc:
            return _crash("egress: internal error", exc, scrub, settings)
        finally:
            if cluster is not None:
                cluster.settle()
        described = f"{cluster.server}: {cluster.requests} API requests"
    if args.json:
        json.dump({**report.as_dict(), "unread_logs": unread}, sys.stdout, indent=2)  # streamed: a fleet's is large
        sys.stdout.write("\n")
    elif args.dot:
        sys.stdout.write(egress.dot(report))
    elif args.suggest:
        sys.stdout.write(egress.suggest(report, no_proxy))
    else:
        sys.stdout.write(egress.table(report))
    for node in unread:
        print(f"proxy-component egress: could not read the proxy's log on {node}", file=sys.stderr)
    print(f"proxy-component egress: {described}; {report.lines} connections, {len(report.misses)} NO_PROXY miss(es)",
          file=sys.stderr)  # fmt: skip
    return 0


ROLLOUT_TIMEOUT = 600  # rollout --apply: seconds an owner may take to be complete and available
PDB_TIMEOUT = 300  # rollout --apply: seconds a PodDisruptionBudget may forbid a restart, or refuse an eviction
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _whole(parser: argparse.ArgumentParser, flag: str, value: str, low: int, high: int, example: int) -> int:
    """A whole-number flag within [low, high], or an error naming the flag, the value and the range."""
    try:
        number = int(value, 10)
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        parser.error(f"{flag}: {value!r} is not a whole number from {low} to {high} (expected e.g. {example})")
    return number


def _check_rollout(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """rollout's flags, all checked before the cluster is read: nothing runs on bad input."""
    from .live.rollout import MAX_CONCURRENT

    low, high = MAX_CONCURRENT
    args.max_concurrent = _whole(parser, "--max-concurrent", args.max_concurrent, low, high, 5)
    args.timeout = _whole(parser, "--timeout", args.timeout, 1, 86400, ROLLOUT_TIMEOUT)
    args.pdb_timeout = _whole(parser, "--pdb-timeout", args.pdb_timeout, 0, 86400, PDB_TIMEOUT)
    namespaces: list[str] = []
    for given in args.namespace or []:
        for name in given.split(","):
            if not _NAMESPACE.fullmatch(name.strip()):
                parser.error(
                    f"--namespace: {name.strip()!r} is not a namespace name (expected a DNS label, e.g. team-a; "
                    "repeat the flag or separate names with commas)"
                )
            namespaces.append(name.strip())
    args.namespace = sorted(set(namespaces)) or None
    if args.selector is not None and not args.selector.strip():
        parser.error("--selector: '' is empty (expected a label selector, e.g. app=web or tier in (front,back))")
    if args.capi and args.apply:
        parser.error("--capi: a plan only (it prints the clusterctl commands that roll the machines), not with --apply")
    if args.capi and (args.namespace or args.selector):
        parser.error("--capi: reads the Cluster API objects of cluster.name in capi.namespace; --namespace and "
                     "--selector are for the workload cluster's pods")  # fmt: skip
    if args.config is None and args.stack is None:
        parser.error(
            "rollout: CONFIG or --stack NAME is required: the settings of the cluster to roll (the embedded example "
            "describes no real cluster)"
        )


def _rollout(args: argparse.Namespace) -> int:
    from .live import CheckError, scrub
    from .live.rollout import RolloutInterruptedError, Runner, capi_plan, plan_rollout

    settings, layered = _load_layered(args.config, args)
    if args.namespace:
        from .live.access import workload_namespaces

        judged = workload_namespaces(settings)
        for name in args.namespace:
            if name not in judged:
                raise ValueError(
                    f"--namespace: {name!r} is not a namespace these settings judge (expected some of: "
                    f"{', '.join(judged) or 'none'}; the namespaces of `namespaces`, outside "
                    "injection.excludeNamespaces)"
                )
    previous = _interruptible()  # on either signal: stop starting work, say where it is
    outcomes: list[Any] = []
    cluster = None
    try:
        cluster = _connect(args, layered, management=args.capi)
        if args.capi:
            machines = capi_plan(settings, cluster)
            if args.json:
                print(json.dumps(machines.as_dict(), indent=2))
            else:
                for note in machines.notes:
                    print(f"# {note}")
                for command in machines.commands:
                    print(command)
            print(f"proxy-component rollout --capi: {cluster.server}: {len(machines.commands)} command(s), a plan "
                  f"only: run them against the management cluster ({cluster.requests} API requests)",
                  file=sys.stderr)  # fmt: skip
            return 0
        # The watch cache (the plan's quick read) may lag what an interrupted run restarted a moment ago: the waves
        # of --apply are made from consistent lists.
        cluster.cached = not args.apply
        plan = plan_rollout(settings, cluster, args.namespace, args.selector, args.max_concurrent)
        if args.apply and plan.steps:
            runner = Runner(
                settings, cluster, plan, timeout=args.timeout, pdb_timeout=args.pdb_timeout,
                progress=lambda line: print(f"proxy-component rollout: {line}", file=sys.stderr, flush=True),
            )  # fmt: skip
            outcomes = runner.run()
    except RolloutInterruptedError as stop:
        cluster = None  # out now, not after its requests in flight
        _print_rollout(args, plan, stop.outcomes)
        print(f"proxy-component rollout: {stop.message}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        cluster = None
        print("proxy-component rollout: interrupted before anything was restarted", file=sys.stderr)
        return 130
    except CheckError as exc:
        print(f"proxy-component rollout: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (SettingsError, NoProxyError, ValueError):
        raise
    except Exception as exc:  # a bug: exit 1 would read as something stale
        return _crash("rollout: internal error", exc, scrub, settings)
    finally:
        _restore(previous)
        if cluster is not None:
            cluster.settle()
    _print_rollout(args, plan, outcomes)
    steps, listed = len(plan.steps), len(plan.listed)
    if not steps and not listed:
        summary = "nothing is stale"
    else:
        summary = (f"{steps + listed} stale owner(s): {steps} to restart in {len(plan.waves)} wave(s) of at most "
                   f"{plan.max_concurrent}, {listed} listed only")  # fmt: skip
    if args.apply:
        failed = [o for o in outcomes if not o.ok]
        summary += f"; {len(outcomes) - len(failed)} done, {len(failed)} blocked or failed"
    else:
        summary += "; a plan: --apply carries it out" if steps else ""
    print(f"proxy-component rollout: {cluster.server}: {summary} ({cluster.requests} API requests)", file=sys.stderr)
    if args.apply:
        return 1 if any(not o.ok for o in outcomes) else 0
    return 1 if steps or listed else 0


def _print_rollout(args: argparse.Namespace, plan: Any, outcomes: Sequence[Any]) -> None:
    if args.json:
        data = plan.as_dict()
        if args.apply:
            data["outcomes"] = [o.as_dict() for o in outcomes]
        print(json.dumps(data, indent=2))
        return
    if args.apply:
        for outcome in outcomes:
            print(outcome)
        return
    for number, wave in enumerate(plan.waves, 1):
        print(f"wave {number} ({len(wave)} owner(s)):")
        for step in wave:
            blocking = f" [now blocked by PDB {', '.join(step.pdbs)}: waits up to --pdb-timeout]" if step.pdbs else ""
            if step.action == "wait":
                left = f" ({step.note})" if step.note else ""
                print(f"  wait     {step.owner.ref}: restarted for this configuration by an earlier run; waits until "
                      f"it is complete{left}")  # fmt: skip
            else:
                bare = " [a bare Pod: evicting ends it, nothing recreates it]" if step.owner.kind == "Pod" else ""
                print(f"  {step.action:<8} {step.owner.ref}: {step.why}{blocking}{bare}")
    if plan.listed:
        print("not restarted:")
        for item in plan.listed:
            print(f"  {item.owner.ref}: {item.reason} ({why(item.owner.pods)})")


def why(pods: Sequence[Any]) -> str:
    from .live.rollout import why as reasons

    return reasons(pods)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _interruptible() -> dict[int, Any]:
    """SIGINT and SIGTERM raise KeyboardInterrupt from here on; the handlers they had, for `_restore`. SIGINT too:
    a shell starts a background job (`cmd &` in a script) with SIGINT ignored, and Python then leaves it ignored,
    so `kill -INT` would not stop a rollout or delete the probe pods. Both are also unblocked, in case the
    process inherited a signal mask that blocks them (a blocked signal stays pending, never delivered)."""
    signals = (signal.SIGINT, signal.SIGTERM)
    previous: dict[int, Any] = {signum: signal.signal(signum, _interrupt) for signum in signals}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
    return previous


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="proxy-component",
        description="Render a cluster's HTTP-proxy egress (tinyproxy, NO_PROXY, proxy-config) without a Pulumi engine.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    config_help = "settings YAML (default: the embedded IPv6-only example)"
    render = sub.add_parser("render", help="write the Kubernetes objects as a YAML stream or one file per object")
    render.add_argument("config", nargs="?", help=config_help)
    render.add_argument("-o", "--output", metavar="DIR", help="write one file per object into DIR")
    render.add_argument(
        "--format",
        nargs="+",
        default=["manifests"],
        metavar="FORMAT",
        help="manifests (default: the workload cluster's objects), helm-values PROFILE, capi (the management "
        "cluster's Secrets, ready to apply), capi-patches (the kubeadm fragments as merge patches for your own "
        "KubeadmControlPlane and KubeadmConfigTemplate, never to apply), kustomize-patch, kyverno, admission (the "
        "MutatingAdmissionPolicy and its binding, ready to kubectl apply), metrics (the PodMonitor, the PrometheusRule "
        "with the alerts and the Grafana dashboard's ConfigMap, whatever deployment.metrics creates), check-rbac (the "
        "ServiceAccount and the least roles `check` runs under), rollout-rbac (those of `rollout`), egress-rbac (those "
        "of `egress`)",
    )
    render.add_argument("--target-kind", default="Deployment", help="kustomize-patch: the workload kind")
    render.add_argument("--target-name", help="kustomize-patch: the workload name")
    render.add_argument(
        "--container", help="kustomize-patch: patch this container by name (strategic merge) instead of index 0"
    )
    runtimes_help = (
        "the workload's runtimes as its annotation writes them: some of java,node,python, or none "
        "(default: the cluster-wide runtimes flags)"
    )
    render.add_argument("--runtimes", help=f"kustomize-patch, helm-values: {runtimes_help}")
    render.add_argument(
        "--release",
        metavar="NAME",
        help="helm-values: the chart's Helm release name, from which the profile derives the in-cluster names its "
        "NO_PROXY adds (argo-cd: <release>-argocd-repo-server, ...; default: the name the chart's docs use)",
    )
    render.add_argument(
        "--probe",
        action="store_true",
        help="check-rbac: also what `check --probe` needs (its namespace, proxy-component-probe, enforcing Pod "
        "Security restricted, and pods there)",
    )
    render.add_argument(
        "--capi",
        action="store_true",
        help="rollout-rbac: the management cluster's role of `rollout --capi` (get the Cluster, list its "
        "MachineDeployments) instead of the workload cluster's",
    )
    _stack_arguments(render)
    render.set_defaults(func=_render)
    no_proxy = sub.add_parser("no-proxy", help="print the composed NO_PROXY value")
    no_proxy.add_argument("config", nargs="?", help=config_help)
    _stack_arguments(no_proxy)
    no_proxy.set_defaults(func=_no_proxy)
    explain = sub.add_parser(
        "explain",
        help="show each NO_PROXY entry and why it is there, the renderings, and what each client does with this "
        "cluster's destinations",
    )
    explain.add_argument("config", nargs="?", help=config_help)
    explain.add_argument(
        "--json",
        action="store_true",
        help='print a JSON list of {"url", "client", "decision", "intended", "warning"}, one per URL and client',
    )
    explain.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help="a destination to judge instead of the representative ones (repeatable)",
    )
    explain.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help="a variable the workload sets itself (ALL_PROXY, npm_config_no_proxy, REQUEST_METHOD...), added to the "
        "rendered environment (repeatable)",
    )
    explain.add_argument("--runtimes", help=runtimes_help)
    _stack_arguments(explain)
    explain.set_defaults(func=_explain)
    check = sub.add_parser(
        "check",
        help="compare a live cluster with the settings; exit 0 when clean, 1 on findings, 2 on bad input or a "
        "cluster it cannot read (unreachable, 401, 403), 3 on an internal error",
    )
    check.add_argument("config", nargs="?", help="this cluster's settings YAML (required)")
    check.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config; in a Pod without either, its service account)",
    )
    check.add_argument("--context", help="kubeconfig context (default: the current one)")
    check.add_argument(
        "--json",
        action="store_true",
        help='print a JSON list of {"kind", "object", "severity", "message"} (with --probe, one more per node and '
        'URL: kind "probe", severity "ok" or "error", and "node", "url", "outcome", "detail")',
    )
    check.add_argument(
        "--probe",
        nargs="+",
        metavar="URL",
        help="also run a short-lived pod on each node with a proxy pod (the proxy's image) that reaches each URL "
        "through that node's proxy; reports ok, filtered, not-allowed, dns-failure, connect-failed, "
        "upstream-refused, upstream-auth, tls-failure, timeout, proxy-unreachable or error per node and URL; needs "
        "the role of `render --format check-rbac --probe`",
    )
    check.add_argument(
        "--probe-timeout", type=int, default=PROBE_WAIT, metavar="SECONDS",
        help=f"--probe: seconds each URL may take in the pod (default {PROBE_WAIT})",
    )  # fmt: skip
    check.add_argument(
        "--probe-deadline", type=int, default=PROBE_DEADLINE, metavar="SECONDS",
        help=f"--probe: seconds for the whole probe, the pods' activeDeadlineSeconds too (default {PROBE_DEADLINE})",
    )  # fmt: skip
    _stack_arguments(check)
    check.set_defaults(func=_check)
    _rollout_parser(sub)
    _egress_parser(sub)
    return parser


def _egress_parser(sub: Any) -> None:
    egress = sub.add_parser(
        "egress",
        help="who reaches what through the proxies: each node's access log joined to pods, per namespace and "
        "workload (destinations, refusals by cause, NO_PROXY misses); from the cluster, or from saved logs and a "
        "saved pod list (--logs, --pods); exit 0, 2 on bad input or a cluster it cannot read, 3 on an internal error",
    )
    egress.add_argument(
        "config", nargs="?",
        help="this cluster's settings YAML (required to read a cluster; with --logs, optional: it gives the cluster's "
        "ranges, domain and NO_PROXY, without which misses are found by name alone)",
    )  # fmt: skip
    egress.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    egress.add_argument("--context", help="kubeconfig context (default: the current one)")
    egress.add_argument(
        "--since", metavar="DURATION",
        help="only the last DURATION (30m, 2h, 1d, 1h30m): of now when reading a cluster, of the newest line with "
        "--logs (default: all the logs hold)",
    )  # fmt: skip
    egress.add_argument(
        "--logs", nargs="+", metavar="PATH",
        help="saved proxy logs instead of the cluster's: files or directories, one file per node named <node>.log "
        "(kubectl logs --timestamps of each proxy pod's metrics container, or tinyproxy's without metrics)",
    )  # fmt: skip
    egress.add_argument("--pods", metavar="FILE", help="--logs: the saved pod list (kubectl get pods -A -o json)")
    egress.add_argument("--nodes", metavar="FILE", help="--logs: a saved node list (kubectl get nodes -o json)")
    shown = egress.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the report as JSON")
    shown.add_argument("--dot", action="store_true", help="print a Graphviz digraph: namespaces to destinations")
    shown.add_argument(
        "--suggest", action="store_true",
        help="print, per namespace, the destinations seen as tinyproxy Filter lines and host entries, and the misses "
        "as NO_PROXY entries: the start of an allowlist (nothing is enforced)",
    )  # fmt: skip
    _stack_arguments(egress)
    egress.set_defaults(func=_egress, parser=egress)


def _rollout_parser(sub: Any) -> None:
    rollout = sub.add_parser(
        "rollout",
        help="restart, in paced waves, the owners of running pods that hold old proxy values (a plan by default, "
        "--apply to carry it out); exit 0 when nothing is stale (with --apply: all done), 1 when something is (with "
        "--apply: something blocked or failed), 2 on bad input or a cluster it cannot read, 3 on an internal error, "
        "130 when interrupted",
    )
    rollout.add_argument("config", nargs="?", help="this cluster's settings YAML (required)")
    rollout.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    rollout.add_argument("--context", help="kubeconfig context (default: the current one)")
    rollout.add_argument("--json", action="store_true", help="print the plan (and with --apply the outcomes) as JSON")
    rollout.add_argument(
        "--namespace", action="append", metavar="NS[,NS...]",
        help="only these namespaces (repeatable, or a comma list; default: those of the settings)",
    )  # fmt: skip
    rollout.add_argument("--selector", metavar="LABELS", help="only pods with these labels (e.g. app=web)")
    rollout.add_argument(
        "--max-concurrent", default="5", metavar="N",
        help="owners restarting at once, one wave at a time (1 to 100, default 5)",
    )  # fmt: skip
    rollout.add_argument("--apply", action="store_true", help="carry the plan out (default: print it)")
    rollout.add_argument(
        "--timeout", default=str(ROLLOUT_TIMEOUT), metavar="SECONDS",
        help=f"--apply: seconds an owner may take to be complete and available, else a failure (default {ROLLOUT_TIMEOUT})",
    )  # fmt: skip
    rollout.add_argument(
        "--pdb-timeout", default=str(PDB_TIMEOUT), metavar="SECONDS",
        help="--apply: seconds to wait while a PodDisruptionBudget allows no disruption, or refuses an eviction, "
        f"before reporting it blocked (default {PDB_TIMEOUT})",
    )  # fmt: skip
    rollout.add_argument(
        "--capi", action="store_true",
        help="a plan for the Cluster API machines instead (--kubeconfig: the management cluster): what a changed "
        "<cluster>-systemd-proxy does to them, and the clusterctl commands that replace them",
    )  # fmt: skip
    _stack_arguments(rollout)
    rollout.set_defaults(func=_rollout)


def _split_probe(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`check --probe URL... CONFIG`: --probe takes every word after it, CONFIG too; give that back to CONFIG.

    Only a last word that is no http:// or https:// URL, and only when CONFIG is not given before: any other word
    that is no such URL is an error naming it.
    """
    urls: list[str] = args.probe
    last = urls[-1]
    if args.config is None and args.stack is None and len(urls) > 1 and not _is_probe_url(last):
        args.config, urls = last, urls[:-1]
    for url in urls:
        if not _is_probe_url(url):
            parser.error(
                f"--probe: {url!r} is not an http:// or https:// URL (expected e.g. https://registry-1.docker.io/v2/; "
                "CONFIG goes before --probe, or after its URLs)"
            )
    args.probe = urls


def _is_probe_url(word: str) -> bool:
    return word.lower().startswith(("http://", "https://"))


def _stack_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stack",
        metavar="NAME",
        help="read the settings as that Pulumi stack's program does (its config on top of the installation layer it "
        "names), through the Pulumi CLI, instead of CONFIG",
    )
    parser.add_argument("--cwd", metavar="DIR", help="--stack: the stack's project directory (default: here)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "render":
        _check_format(parser, args)
    if args.command == "rollout":
        _check_rollout(parser, args)
    if args.command == "check" and args.probe:
        _split_probe(parser, args)
    if args.command == "check" and args.config is None and args.stack is None:
        parser.error(
            "check: CONFIG or --stack NAME is required: the settings of the cluster to compare (the embedded "
            "example describes no real cluster)"
        )
    if args.command == "egress" and args.logs and not args.pods:
        parser.error("egress --logs: --pods FILE is required (kubectl get pods -A -o json): it joins addresses to pods")
    if args.command == "egress" and not args.logs and args.config is None and args.stack is None:
        parser.error("egress: CONFIG or --stack NAME is required to read a cluster (or give --logs and --pods)")
    try:
        result: int = args.func(args)
    except (SettingsError, NoProxyError, ValueError) as exc:
        print(f"proxy-component: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return result


if __name__ == "__main__":
    sys.exit(main())
