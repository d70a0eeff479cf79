"""Benchmark `ClusterProxy` construction under Pulumi mocks, against a hand-written baseline, and import costs.

Run from the repository root:

    .venv/bin/python bench/bench_component.py            # markdown tables
    .venv/bin/python bench/bench_component.py --json     # one JSON document

Progress goes to stderr; the report (markdown or JSON) goes to stdout. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import FrameType
from typing import Any

import pulumi
import pulumi.runtime.settings as runtime_settings
import pulumi_kubernetes as k8s
from pulumi.runtime.stack import wait_for_rpcs

from proxy_component.component import ClusterNetwork, ClusterProxy, ClusterProxyArgs

REPO_ROOT = Path(__file__).resolve().parent.parent
CLOUD_SDKS = ("pulumi_aws", "pulumi_gcp", "pulumi_azure_native")
DEFAULT_SIZES = (1, 50, 500)
PROFILE_RATIO = 2.0  # profile the component when it is this many times slower than the baseline at the largest size

Obj = dict[str, Any]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- mocks and one measured run -----------------------------------------------------------------


@dataclass(frozen=True)
class Registration:
    typ: str
    name: str
    custom: bool


class RecordingMocks(pulumi.runtime.Mocks):
    """Records every `new_resource` (the mock monitor calls it from executor threads) and echoes inputs as state.

    The mock monitor gives each executor thread its own event loop and never closes it; the loops are noted
    here so that `run_once` can close them (otherwise their finalizers raise "Invalid file descriptor" noise).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.registrations: list[Registration] = []
        self.thread_loops: set[asyncio.AbstractEventLoop] = set()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        loop = None
        if threading.current_thread() is not threading.main_thread():
            try:
                loop = asyncio.get_event_loop_policy().get_event_loop()
            except RuntimeError:
                loop = None
        with self._lock:
            self.registrations.append(Registration(args.typ, args.name, bool(args.custom)))
            if loop is not None:
                self.thread_loops.add(loop)
        return f"{args.name}_id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None

    def clear(self) -> None:
        with self._lock:
            self.registrations.clear()

    def close_thread_loops(self) -> None:
        with self._lock:
            loops, self.thread_loops = self.thread_loops, set()
        for loop in loops:
            if not loop.is_closed() and not loop.is_running():
                loop.close()


_RESET_OPTIONS: Callable[..., None] | None = getattr(runtime_settings, "reset_options", None)


def _reset_runtime() -> None:
    """Forget the previous run's root stack and settings (`reset_options` exists in pulumi >= 3.x; fall back otherwise)."""
    if _RESET_OPTIONS is not None:
        _RESET_OPTIONS()
    else:  # pragma: no cover - older SDKs
        runtime_settings.ROOT.set(None)
        runtime_settings.configure(runtime_settings.Settings(project=None, stack=None))


@dataclass(frozen=True)
class RunResult:
    total_s: float  # constructor call until wait_for_rpcs() returned
    ctor_s: float  # the synchronous constructor call alone
    registrations: tuple[Registration, ...]


def run_once(build: Callable[[], object], profiler: cProfile.Profile | None = None) -> RunResult:
    """One program on a fresh event loop and fresh mocks; the clock covers `build()` plus draining every RPC."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = RecordingMocks()
    try:
        _reset_runtime()
        pulumi.runtime.set_mocks(mocks, project="bench", stack="bench", preview=False)
        loop.run_until_complete(wait_for_rpcs())  # the root Stack's own registration, outside the clock
        mocks.clear()
        gc.collect()
        if profiler is not None:
            profiler.enable()
        start = time.perf_counter()
        build()
        built = time.perf_counter()
        loop.run_until_complete(wait_for_rpcs())
        done = time.perf_counter()
        if profiler is not None:
            profiler.disable()
        return RunResult(done - start, built - start, tuple(mocks.registrations))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        mocks.close_thread_loops()
        asyncio.set_event_loop(None)
        _reset_runtime()


# --- the programs ---------------------------------------------------------------------------------

POD_CIDRS = ["10.244.0.0/16"]
SERVICE_CIDRS = ["10.96.0.0/12"]
NODE_CIDRS = ["10.0.0.0/20", "10.0.16.0/20"]
API_SERVER_HOSTS = ["ABCDEF0123456789.gr7.eu-west-1.eks.amazonaws.com"]


def namespaces(count: int) -> list[str]:
    return [f"team-{i:04d}" for i in range(count)]


def cluster_settings(count: int, *, with_cidrs: bool = True) -> Obj:
    """Stack-config style settings (camelCase mapping) of an IPv4 EKS-like cluster."""
    cluster: Obj = {"name": "prod-eu1", "dnsDomain": "cluster.local", "cloud": "aws", "region": "eu-west-1"}
    if with_cidrs:
        cluster |= {
            "podCidrs": POD_CIDRS,
            "serviceCidrs": SERVICE_CIDRS,
            "nodeCidrs": NODE_CIDRS,
            "apiServerHosts": API_SERVER_HOSTS,
        }
    return {"cluster": cluster, "proxy": {"noProxy": [".corp.example.com"]}, "namespaces": namespaces(count)}


def build_component(count: int) -> Callable[[], object]:
    settings = cluster_settings(count)

    def build() -> object:
        return ClusterProxy("egress", ClusterProxyArgs(settings=settings))

    return build


def build_component_outputs(count: int) -> Callable[[], object]:
    settings = cluster_settings(count, with_cidrs=False)

    def build() -> object:
        # Outputs must be created on the run's own event loop, so inside build().
        network = ClusterNetwork(
            pod_cidrs=pulumi.Output.from_input(POD_CIDRS),
            service_cidrs=pulumi.Output.from_input(SERVICE_CIDRS),
            node_cidrs=pulumi.Output.from_input(NODE_CIDRS),
            api_server_hosts=pulumi.Output.from_input(API_SERVER_HOSTS),
            origin="eks",
        )
        return ClusterProxy("egress", ClusterProxyArgs(settings=settings, network=network))

    return build


_BASELINE_LABELS = {
    "app": "http-proxy",
    "app.kubernetes.io/name": "tinyproxy",
    "app.kubernetes.io/part-of": "proxy-component",
}
_BASELINE_URL = "http://http-proxy.kube-system.svc.cluster.local:8888"
_BASELINE_NO_PROXY = (
    "localhost,127.0.0.1,::1,.svc,.svc.cluster.local,.cluster.local,10.96.0.0/12,10.244.0.0/16,10.0.0.0/20,"
    "10.0.16.0/20,abcdef0123456789.gr7.eu-west-1.eks.amazonaws.com,169.254.169.254,169.254.170.23,fd00:ec2::254,"
    ".eu-west-1.compute.internal,.corp.example.com"
)


def _baseline_daemonset() -> Obj:
    probe = {"tcpSocket": {"port": 8888}, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3}
    return {
        "metadata": {"name": "http-proxy", "namespace": "kube-system", "labels": _BASELINE_LABELS},
        "spec": {
            "selector": {"matchLabels": {"app": "http-proxy"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {
                    "labels": _BASELINE_LABELS,
                    "annotations": {"proxy-component/restart-inputs": "port=8888 firewall=" + "0" * 16},
                },
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "Default",
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
                    "containers": [
                        {
                            "name": "tinyproxy",
                            "image": "docker.io/vimagick/tinyproxy:latest",
                            "command": ["tinyproxy", "-d", "-c", "/etc/tinyproxy/tinyproxy.conf"],
                            "ports": [
                                {"name": "http-proxy", "containerPort": 8888, "hostPort": 8888, "protocol": "TCP"}
                            ],
                            "readinessProbe": {**probe, "initialDelaySeconds": 2},
                            "livenessProbe": {**probe, "initialDelaySeconds": 10},
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"cpu": "500m", "memory": "128Mi"},
                            },
                            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/tinyproxy", "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": "http-proxy-config"}}],
                },
            },
        },
    }


def _baseline_service() -> Obj:
    return {
        "metadata": {"name": "http-proxy", "namespace": "kube-system", "labels": _BASELINE_LABELS},
        "spec": {
            "selector": {"app": "http-proxy"},
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http-proxy", "port": 8888, "targetPort": 8888, "protocol": "TCP"}],
        },
    }


def _baseline_configmap(namespace: str) -> Obj:
    data: dict[str, str] = {}
    for name, value in (
        ("HTTP_PROXY", _BASELINE_URL),
        ("HTTPS_PROXY", _BASELINE_URL),
        ("NO_PROXY", _BASELINE_NO_PROXY),
    ):
        data[name] = data[name.lower()] = value
    labels = {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": "proxy-env"}
    return {"metadata": {"name": "proxy-config", "namespace": namespace, "labels": labels}, "data": data}


def build_baseline(count: int) -> Callable[[], object]:
    """A hand-written program: a DaemonSet, a Service and `count` ConfigMaps, plain values, no component."""
    names = namespaces(count)

    def build() -> object:
        created: list[pulumi.CustomResource] = [
            k8s.apps.v1.DaemonSet("http-proxy", **_baseline_daemonset()),
            k8s.core.v1.Service("http-proxy", **_baseline_service()),
        ]
        created += [k8s.core.v1.ConfigMap(f"proxy-config-{ns}", **_baseline_configmap(ns)) for ns in names]
        return created

    return build


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    make: Callable[[int], Callable[[], object]]
    expected: Callable[[int], int]


SCENARIOS = (
    Scenario("baseline", "hand-written DaemonSet + Service + N ConfigMaps", build_baseline, lambda n: 2 + n),
    Scenario("component", "ClusterProxy, static settings", build_component, lambda n: 1 + 3 + n),
    Scenario(
        "component+outputs",
        "ClusterProxy, CIDRs/hosts as ClusterNetwork Outputs",
        build_component_outputs,
        lambda n: 1 + 3 + n,
    ),
)


# --- construction benchmark -----------------------------------------------------------------------


@dataclass
class ConstructionRow:
    scenario: str
    namespaces: int
    reps: int
    median_ms: float
    min_ms: float
    median_ctor_ms: float
    resources: int
    expected_resources: int
    resources_by_type: dict[str, int]
    vs_baseline: float | None = None
    samples_ms: list[float] = field(default_factory=list)


def _by_type(registrations: Sequence[Registration]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reg in registrations:
        counts[reg.typ] = counts.get(reg.typ, 0) + 1
    return dict(sorted(counts.items()))


def bench_construction(sizes: Sequence[int], reps: int, budget_s: float) -> list[ConstructionRow]:
    log("warm-up: one run of every scenario with 1 namespace (lazy imports, pydantic caches)")
    for scenario in SCENARIOS:
        run_once(scenario.make(1))

    rows: list[ConstructionRow] = []
    for size in sizes:
        builds = {s.name: s.make(size) for s in SCENARIOS}
        results: dict[str, list[RunResult]] = {s.name: [] for s in SCENARIOS}
        wanted = reps
        rep = 0
        while rep < wanted:
            started = time.perf_counter()
            for scenario in SCENARIOS:  # interleaved, so drift hits every scenario alike
                results[scenario.name].append(run_once(builds[scenario.name]))
            if rep == 0:
                per_rep = time.perf_counter() - started
                wanted = max(1, min(reps, int(budget_s // per_rep) if per_rep > 0 else reps))
                if wanted < reps:
                    log(f"  {size} namespaces: {per_rep:.1f} s per repetition, reducing to {wanted} repetitions")
            rep += 1
        for scenario in SCENARIOS:
            runs = results[scenario.name]
            totals = [r.total_s * 1000 for r in runs]
            last = runs[-1].registrations
            rows.append(
                ConstructionRow(
                    scenario=scenario.name,
                    namespaces=size,
                    reps=len(runs),
                    median_ms=statistics.median(totals),
                    min_ms=min(totals),
                    median_ctor_ms=statistics.median(r.ctor_s * 1000 for r in runs),
                    resources=len(last),
                    expected_resources=scenario.expected(size),
                    resources_by_type=_by_type(last),
                    samples_ms=[round(t, 2) for t in totals],
                )
            )
            log(f"  {scenario.name:<18} {size:>4} ns: median {rows[-1].median_ms:8.1f} ms, {len(last)} resources")
    baselines = {r.namespaces: r.median_ms for r in rows if r.scenario == "baseline"}
    for row in rows:
        base = baselines.get(row.namespaces)
        row.vs_baseline = row.median_ms / base if base else None
    return rows


# --- profiling (main thread and the executor threads that run the mock monitor) -------------------

# Idle executor threads and GIL hand-offs: time spent waiting, not working; left out of the tables.
_WAITS = (
    "'get' of '_queue.SimpleQueue'",
    "'poll' of 'select.",
    "'acquire' of '_thread.lock'",
    "'send' of '_socket.socket'",
    "'recv' of '_socket.socket'",
)


@dataclass
class ProfileReport:
    namespaces: int
    component_ms: float  # wall time of the profiled component run (inflated by the profiler)
    baseline_ms: float  # wall time of the profiled baseline run
    by_tottime: list[Obj]  # the component run, top functions by own time
    component_functions: list[Obj]  # proxy_component's own functions by cumulative time
    over_baseline: list[Obj]  # own time the component run spends beyond the baseline run, per function


def _short_path(filename: str) -> str:
    for marker in ("site-packages/", f"{REPO_ROOT}/", "/lib/python3."):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "/lib/python3." else tail
    return filename


def _flatten(stats: pstats.Stats) -> dict[str, tuple[int, float, float]]:
    """function -> (calls, own seconds, cumulative seconds), without waits."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    flat: dict[str, tuple[int, float, float]] = {}
    for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in raw.items():
        where = f"{_short_path(filename)}:{line}({func})"
        if not any(w in where for w in _WAITS):
            calls, own, cum = flat.get(where, (0, 0.0, 0.0))
            flat[where] = (calls + ncalls, own + tottime, cum + cumtime)
    return flat


def _rows(items: Sequence[tuple[str, tuple[int, float, float]]]) -> list[Obj]:
    return [
        {"function": f, "ncalls": c, "tottime_ms": round(t * 1000, 2), "cumtime_ms": round(cum * 1000, 2)}
        for f, (c, t, cum) in items
    ]


def _profile_run(build: Callable[[], object]) -> tuple[dict[str, tuple[int, float, float]], float]:
    """cProfile one run; the mock monitor's RegisterResource runs in executor threads, so profile those too."""
    thread_profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start_thread_profile(_frame: FrameType, _event: str, _arg: Any) -> None:
        prof = cProfile.Profile()
        with lock:
            thread_profiles.append(prof)
        prof.enable()  # replaces this hook in the new thread

    main = cProfile.Profile()
    threading.setprofile(start_thread_profile)
    try:
        result = run_once(build, main)
    finally:
        threading.setprofile(None)
    stats = pstats.Stats(main, stream=io.StringIO())
    for prof in thread_profiles:
        stats.add(prof)
    return _flatten(stats), result.total_s * 1000


def profile_component(size: int, limit: int = 20) -> ProfileReport:
    component, component_ms = _profile_run(build_component(size))
    baseline, baseline_ms = _profile_run(build_baseline(size))
    by_own = sorted(component.items(), key=lambda kv: kv[1][1], reverse=True)[:limit]
    own_funcs = [kv for kv in component.items() if kv[0].startswith("proxy_component/")]
    own_funcs.sort(key=lambda kv: kv[1][2], reverse=True)
    extra: list[tuple[str, tuple[int, float, float]]] = []
    for name, (calls, own, cum) in component.items():
        b_calls, b_own, b_cum = baseline.get(name, (0, 0.0, 0.0))
        extra.append((name, (calls - b_calls, own - b_own, cum - b_cum)))
    extra.sort(key=lambda kv: kv[1][1], reverse=True)
    return ProfileReport(
        namespaces=size,
        component_ms=component_ms,
        baseline_ms=baseline_ms,
        by_tottime=_rows(by_own),
        component_functions=_rows(own_funcs[:limit]),
        over_baseline=_rows(extra[:limit]),
    )


# --- imports --------------------------------------------------------------------------------------

_IMPORTTIME = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|( *)(\S.*)$")


@dataclass
class ImportRow:
    statement: str
    wall_median_ms: float
    wall_min_ms: float
    over_pass_ms: float | None
    no_shutdown_median_ms: float | None  # the same statement followed by os._exit(0): start-up and import only
    importtime_ms: float | None  # -X importtime cumulative of the proxy_component rows
    modules: int | None
    cloud_sdks: list[str] | None
    heaviest: list[tuple[str, float]] = field(default_factory=list)  # (root package, self ms summed)
    notable: dict[str, float] = field(default_factory=dict)  # -X importtime cumulative ms of NOTABLE_MODULES
    error: str | None = None


def _python(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *flags, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )


def _wall_ms(code: str, reps: int) -> list[float]:
    _python(code)  # bytecode caches written; every timed run is warm
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        _python(code)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


NOTABLE_MODULES = (
    "proxy_component.noproxy",
    "proxy_component.settings",
    "pydantic",
    "yaml",
    "pulumi",
    "grpc",
    "google.protobuf",
    "opentelemetry",
    "pulumi_kubernetes",
    "pulumi_kubernetes.core.v1._inputs",  # the lazily loaded core.v1/apps.v1 packages get no row of their own,
    "pulumi_kubernetes.core.v1.outputs",  # so their big generated modules stand for them
    "pulumi_kubernetes.apps.v1._inputs",
)


def _importtime(statement: str) -> tuple[float | None, list[tuple[str, float]], dict[str, float]]:
    proc = _python(statement, "-X", "importtime")
    own = 0.0
    found = False
    by_root: dict[str, float] = {}
    notable: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        match = _IMPORTTIME.match(line)
        if match is None:
            continue
        self_us, cumulative_us, indent, name = int(match[1]), int(match[2]), match[3], match[4].strip()
        root = name.split(".")[0]
        if len(indent) <= 1 and root == "proxy_component":
            own += cumulative_us / 1000
            found = True
        if name in NOTABLE_MODULES and name not in notable:
            notable[name] = round(cumulative_us / 1000, 1)
        key = "(stdlib)" if root in sys.stdlib_module_names or root.startswith("_") else root
        by_root[key] = by_root.get(key, 0.0) + self_us / 1000
    heaviest = sorted(by_root.items(), key=lambda kv: kv[1], reverse=True)[:10]
    return (own if found else None), [(k, round(v, 1)) for k, v in heaviest], notable


_PROBE = (
    "import json, sys\n{statement}\n"
    "roots = {{m.split('.')[0] for m in sys.modules}}\n"
    "print(json.dumps({{'modules': len(sys.modules), 'cloud': sorted(roots & set({cloud!r}))}}))"
)


def bench_imports(reps: int) -> list[ImportRow]:
    rows: list[ImportRow] = []
    pass_median: float | None = None
    for statement in ("pass", "import proxy_component", "import proxy_component.component"):
        log(f"imports: {statement!r}")
        probe = _python(_PROBE.format(statement=statement, cloud=CLOUD_SDKS))
        if probe.returncode != 0:
            tail = (probe.stderr.strip().splitlines() or ["?"])[-1]
            rows.append(ImportRow(statement, 0.0, 0.0, None, None, None, None, None, error=tail))
            continue
        facts = json.loads(probe.stdout.strip().splitlines()[-1])
        samples = _wall_ms(statement, reps)
        median = statistics.median(samples)
        no_shutdown = statistics.median(_wall_ms(f"{statement}\nimport os\nos._exit(0)", reps))
        if statement == "pass":
            pass_median = median
            importtime, heaviest, notable = None, list[tuple[str, float]](), dict[str, float]()
        else:
            importtime, heaviest, notable = _importtime(statement)
        rows.append(
            ImportRow(
                statement=statement,
                wall_median_ms=median,
                wall_min_ms=min(samples),
                over_pass_ms=None if pass_median is None or statement == "pass" else median - pass_median,
                no_shutdown_median_ms=no_shutdown,
                importtime_ms=importtime,
                modules=int(facts["modules"]),
                cloud_sdks=[str(m) for m in facts["cloud"]],
                heaviest=heaviest,
                notable=notable,
            )
        )
    return rows


# --- report ---------------------------------------------------------------------------------------


def _environment() -> Obj:
    def pkg(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "pulumi": pkg("pulumi"),
        "pulumi-kubernetes": pkg("pulumi-kubernetes"),
        "pydantic": pkg("pydantic"),
        "reset_options": _RESET_OPTIONS is not None,
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(
    env: Obj, construction: list[ConstructionRow], imports: list[ImportRow], profile: ProfileReport | None
) -> str:
    out = [
        f"Python {env['python']}, pulumi {env['pulumi']}, pulumi-kubernetes {env['pulumi-kubernetes']}, "
        f"{env['cpus']} CPUs, {env['platform']}",
        "",
    ]
    if construction:
        out += [
            "### Construction under `pulumi.runtime.set_mocks` (constructor call until `wait_for_rpcs()` returns)",
            "",
            "| scenario | namespaces | reps | median ms | min ms | ctor-only median ms | x baseline | resources (expected) |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in construction:
            flag = "" if r.resources == r.expected_resources else " **MISMATCH**"
            out.append(
                f"| {r.scenario} | {r.namespaces} | {r.reps} | {r.median_ms:.1f} | {r.min_ms:.1f} | {r.median_ctor_ms:.1f} | "
                f"{_fmt(r.vs_baseline, 2)} | {r.resources} ({r.expected_resources}){flag} |"
            )
        marginal = _marginal(construction)
        if marginal:
            out += ["", "Marginal cost per namespace (median, between the two largest sizes):", ""]
            out += ["| scenario | ms per namespace |", "|---|---:|"]
            out += [f"| {name} | {ms:.3f} |" for name, ms in marginal.items()]
        out.append("")
    if imports:
        out += [
            "### Imports (fresh interpreter, warm bytecode cache; wall = median/min of subprocess runs)",
            "",
            "| statement | wall median ms | wall min ms | minus `pass` ms | median ms without shutdown (os._exit) "
            "| -X importtime ms | modules | cloud SDKs in sys.modules |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for i in imports:
            if i.error is not None:
                out.append(f"| `{i.statement}` | failed: {i.error} | | | | | | |")
                continue
            clouds = ", ".join(i.cloud_sdks or []) or "none"
            out.append(
                f"| `{i.statement}` | {i.wall_median_ms:.0f} | {i.wall_min_ms:.0f} | {_fmt(i.over_pass_ms, 0)} | "
                f"{_fmt(i.no_shutdown_median_ms, 0)} | "
                f"{_fmt(i.importtime_ms, 0)} | {i.modules} | {clouds} |"
            )
        for i in imports:
            if i.heaviest:
                out += [
                    "",
                    f"Heaviest packages in `{i.statement}` (-X importtime self time summed per top-level package):",
                    "",
                ]
                out += ["| package | self ms |", "|---|---:|"]
                out += [f"| {name} | {ms:.1f} |" for name, ms in i.heaviest]
        timed = [i for i in imports if i.notable]
        if timed:
            out += ["", "Selected modules, -X importtime cumulative ms (blank: not imported):", ""]
            out += ["| module | " + " | ".join(f"`{i.statement}`" for i in timed) + " |"]
            out += ["|---|" + "---:|" * len(timed)]
            for module in NOTABLE_MODULES:
                cells = [_fmt(i.notable.get(module)) if module in i.notable else "" for i in timed]
                out.append(f"| {module} | " + " | ".join(cells) + " |")
        out.append("")
    if profile is not None:
        out += [
            f"### cProfile, {profile.namespaces} namespaces: component run {profile.component_ms:.0f} ms, "
            f"baseline run {profile.baseline_ms:.0f} ms under the profiler",
            "",
            "Main thread plus the executor threads that run the mock monitor (their times overlap); idle waits "
            "(queue get, epoll, lock acquire, self-pipe send/recv) are left out.",
        ]
        for title, rows in (
            ("Component run, top by own time", profile.by_tottime),
            ("proxy_component functions, by cumulative time", profile.component_functions),
            (
                "Own time the component run spends beyond the baseline run (calls and ms are differences)",
                profile.over_baseline,
            ),
        ):
            out += ["", f"{title}:", "", "| function | calls | tottime ms | cumtime ms |", "|---|---:|---:|---:|"]
            out += [
                f"| `{r['function']}` | {r['ncalls']} | {r['tottime_ms']:.1f} | {r['cumtime_ms']:.1f} |" for r in rows
            ]
        out.append("")
    return "\n".join(out)


def _marginal(rows: list[ConstructionRow]) -> dict[str, float]:
    sizes = sorted({r.namespaces for r in rows})
    if len(sizes) < 2:
        return {}
    small, large = sizes[-2], sizes[-1]
    medians = {(r.scenario, r.namespaces): r.median_ms for r in rows}
    return {
        s.name: (medians[(s.name, large)] - medians[(s.name, small)]) / (large - small)
        for s in SCENARIOS
        if (s.name, large) in medians and (s.name, small) in medians
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of markdown tables")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per scenario and size (default 5)")
    parser.add_argument(
        "--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="namespace counts (default 1,50,500)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=60.0,
        help="seconds per size; fewer repetitions when one repetition exceeds budget/reps",
    )
    parser.add_argument("--import-reps", type=int, default=5, help="subprocess runs per import statement (default 5)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help=f"always cProfile the largest size (default: only if > {PROFILE_RATIO}x baseline)",
    )
    parser.add_argument("--skip-construction", action="store_true")
    parser.add_argument("--skip-imports", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    env = _environment()
    construction = [] if args.skip_construction else bench_construction(sizes, args.reps, args.budget)
    profile: ProfileReport | None = None
    if construction:
        largest = max(sizes)
        ratio = next(
            (r.vs_baseline for r in construction if r.scenario == "component" and r.namespaces == largest), None
        )
        if args.profile or (ratio is not None and ratio > PROFILE_RATIO):
            log(f"profiling the component with {largest} namespaces (x baseline: {_fmt(ratio, 2)})")
            profile = profile_component(largest)
    imports = [] if args.skip_imports else bench_imports(args.import_reps)
    if args.json:
        document = {
            "environment": env,
            "construction": [asdict(r) for r in construction],
            "marginal_ms_per_namespace": _marginal(construction),
            "imports": [asdict(i) for i in imports],
            "profile": asdict(profile) if profile is not None else None,
        }
        print(json.dumps(document, indent=2))
    else:
        print(markdown(env, construction, imports, profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
