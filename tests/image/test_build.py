"""The project's image as scripts/image builds it: reproducible, what its config says, what its layer holds, and its
tools run from its own root filesystem.

Each architecture is built twice: once through the cache (`scripts/image ARCH`, what .ci/run built just before) and
once into a directory of the test's own (`scripts/image --out DIR ARCH`, the cache bypassed); both give the same
archive, byte for byte. The amd64 root filesystem is unpacked and used read-only through a bind mount in a mount
namespace of the test's own, the way a container runtime gives it with `readOnlyRootFilesystem`: the tools run with
`chroot --userspec` as the image's user (61888:61888), the firewall's init script as root in a network namespace of
its own. The arm64 binaries run under qemu-user (`qemu-aarch64 -L ROOT`), which cannot open netlink sockets, so
nft is only checked to be an aarch64 program there. Last, a containerd of the test's own imports both archives and
runs a container of the image.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy_component.dataplane.config import tinyproxy_conf, tinyproxy_filter
from proxy_component.dataplane.firewall import FIREWALL_TABLE, firewall_command, firewall_rules
from proxy_component.dataplane.image import DEFAULT_IMAGE, TINYPROXY_COMMIT, TINYPROXY_VERSION
from proxy_component.probe import TlsClient, classify, parse_targets, parse_transcript, pod_script, tls_client
from tests.integration.test_probe_live import CONFIGURED, OTHER, WAIT, _free_port, _Http, _settings, _Tls, serving
from tests.integration.test_tinyproxy_live import with_port

ROOT = Path(__file__).resolve().parents[2]
USER = "61888:61888"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the image's config says so (tested)
APPLETS = ("sh", "nc", "base64", "timeout", "sleep", "cat", "echo", "printf")  # the probe's and the init script's


@dataclass
class Built:
    archive: Path
    digest: str
    config: dict[str, Any]
    layer: Path  # the gzipped layer blob
    root: Path  # the unpacked root filesystem

    def pins(self) -> list[str]:
        arch = self.config["architecture"]
        lines = (ROOT / f"images/proxy/packages.{arch}").read_text().splitlines()
        return sorted(line for line in lines if line and not line.startswith("#"))


def _scripts_image(*args: str) -> Path:
    done = subprocess.run(["bash", str(ROOT / "scripts/image"), *args], capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        pytest.fail(f"scripts/image {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.splitlines()[-1])


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _unpack(archive: Path, dest: Path) -> Built:
    layout = dest / "layout"
    layout.mkdir(parents=True)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(layout)], check=True)
    index = json.loads((layout / "index.json").read_text())
    [entry] = index["manifests"]
    manifest = json.loads(_blob(layout, entry["digest"]).read_text())
    config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
    [layer] = manifest["layers"]
    root = dest / "root"
    root.mkdir()
    subprocess.run(
        ["tar", "-xzpf", str(_blob(layout, layer["digest"])), "--numeric-owner", "-C", str(root)], check=True
    )
    return Built(archive, entry["digest"], config, _blob(layout, layer["digest"]), root)


_BUILT: dict[str, Built] = {}


def _image(arch: str, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The cached build of `arch`, unpacked once per session."""
    if arch not in _BUILT:
        _BUILT[arch] = _unpack(_scripts_image(arch), tmp_path_factory.mktemp(f"image-{arch}"))
    return _BUILT[arch]


@pytest.fixture(params=["amd64", "arm64"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _image(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def amd64(tmp_path_factory: pytest.TempPathFactory) -> Built:
    image = _image("amd64", tmp_path_factory)
    # Mount points, as a container runtime makes them: the config volume, the probe's scratch, the resolver file.
    for directory in ("etc/tinyproxy", "probe"):
        (image.root / directory).mkdir(exist_ok=True)
    (image.root / "etc/resolv.conf").touch()
    return image


@pytest.fixture(scope="module")
def arm64(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _image("arm64", tmp_path_factory)


def test_two_builds_give_the_same_digest(built: Built, tmp_path: Path) -> None:
    arch = built.config["architecture"]
    again = _scripts_image("--out", str(tmp_path), arch)
    assert again == tmp_path / "image.oci.tar"
    assert (tmp_path / "digest").read_text().strip() == built.digest
    assert again.read_bytes() == built.archive.read_bytes()
    assert (tmp_path / "ref").read_text() == f"{DEFAULT_IMAGE}\n"
    assert sorted((tmp_path / "packages").read_text().splitlines()) == sorted(
        [*built.pins(), f"tinyproxy={TINYPROXY_VERSION}"]
    )


def test_the_config_runs_tinyproxy_as_the_settings_user(built: Built) -> None:
    config = built.config["config"]
    assert config["User"] == USER
    assert config["Env"] == [f"PATH={IMAGE_PATH}"]
    assert (config["Entrypoint"], config["Cmd"]) == (
        ["/usr/bin/tinyproxy"],
        ["-d", "-c", "/etc/tinyproxy/tinyproxy.conf"],
    )
    assert config["Labels"]["org.opencontainers.image.version"] == DEFAULT_IMAGE.rsplit(":", 1)[1]
    assert built.config["os"] == "linux"


def test_the_layer_holds_no_setuid_program_no_device_and_no_build_leftovers(built: Built) -> None:
    with tarfile.open(built.layer) as tar:
        members = tar.getmembers()
    names = {m.name.removeprefix("./").rstrip("/") for m in members}
    assert {"usr/bin/tinyproxy", "usr/sbin/nft", "usr/bin/busybox", "etc/passwd", "var/lib/dpkg/status"} <= names
    assert {(m.uid, m.gid) for m in members} == {(0, 0)}
    assert [m.name for m in members if m.mode & 0o6000] == []
    assert [m.name for m in members if m.ischr() or m.isblk() or m.isfifo()] == []
    leftovers = ("etc/apt", "var/lib/apt", "var/cache/apt", "etc/resolv.conf", "etc/hostname", "dev/")
    assert [n for n in names if n.startswith(leftovers)] == []
    passwd = (built.root / "etc/passwd").read_text().splitlines()
    assert "tinyproxy:x:61888:61888:tinyproxy:/nonexistent:/usr/sbin/nologin" in passwd
    assert "tinyproxy:x:61888:" in (built.root / "etc/group").read_text().splitlines()
    for applet in APPLETS:
        assert os.readlink(built.root / "usr/bin" / applet) == "busybox", applet


def test_the_dpkg_database_lists_exactly_the_pinned_packages(built: Built) -> None:
    """What scanners and SBOM tools read (the release workflow's SBOM too)."""
    listed = subprocess.run(
        ["dpkg-query", f"--admindir={built.root}/var/lib/dpkg", "-W", "-f", "${Package}=${Version}\\n"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert sorted(listed.splitlines()) == built.pins()
    assert not [line for line in listed.splitlines() if line.startswith("tinyproxy")], "built from source, not Debian's"


def test_an_sbom_document_declares_the_tinyproxy_built_from_upstreams_commit(built: Built) -> None:
    """The SPDX document scanners find in the root filesystem names upstream's commit, the patches and the binary."""
    doc = json.loads((built.root / "usr/share/doc/tinyproxy/tinyproxy.spdx.json").read_text())
    [package] = doc["packages"]
    assert (package["name"], package["versionInfo"]) == ("tinyproxy", TINYPROXY_VERSION)
    assert package["downloadLocation"] == f"git+https://github.com/tinyproxy/tinyproxy.git@{TINYPROXY_COMMIT}"
    assert package["externalRefs"][0]["referenceLocator"] == f"pkg:github/tinyproxy/tinyproxy@{TINYPROXY_COMMIT}"
    binary = hashlib.sha256((built.root / "usr/bin/tinyproxy").read_bytes()).hexdigest()
    assert package["checksums"] == [{"algorithm": "SHA256", "checksumValue": binary}]
    patches = sorted(p.name for p in (ROOT / "images/proxy/tinyproxy/patches").glob("*.patch"))
    assert len(patches) == 25
    assert all(name in package["sourceInfo"] for name in patches)
    assert "GNU GENERAL PUBLIC LICENSE" in (built.root / "usr/share/doc/tinyproxy/copyright").read_text()
    labels = built.config["config"]["Labels"]
    assert labels["io.proxy-component.tinyproxy.commit"] == TINYPROXY_COMMIT
    assert labels["io.proxy-component.tinyproxy.version"] == TINYPROXY_VERSION


def in_image(image: Built, command: list[str], *, user: str = USER, binds: dict[str, Path] | None = None,
             net: bool = False, writable: bool = False) -> list[str]:  # fmt: skip
    """`command` in the image's root, read-only, with `binds` (path in the image -> host path) mounted over it;
    `writable`: the binds read-write even where the host path lies in the read-only root (a volume of the pod's)."""
    # /dev as a runtime gives it (the image has an empty /dev); then the root read-only
    script = ['mount --rbind "$R" "$R"', 'mount -o remount,bind,ro "$R"', 'mount --rbind /dev "$R/dev"']
    for dest, src in (binds or {}).items():
        script.append(f'mount --bind {src} "$R/{dest.strip("/")}"')
        if writable:
            script.append(f'mount -o remount,bind,rw "$R/{dest.strip("/")}"')
    script.append(f'exec chroot --userspec={user} "$R" "$@"')
    namespaces = ["--mount", "--propagation", "private", *(["--net"] if net else [])]
    return ["unshare", *namespaces, "sh", "-euc", "; ".join(script), "in-image", *command]


def _run(image: Built, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {"R": str(image.root), "PATH": IMAGE_PATH}
    return subprocess.run(in_image(image, command, **kwargs), env=env, capture_output=True, text=True, timeout=60)


def test_the_tools_run_read_only_as_the_images_user(amd64: Built) -> None:
    assert _run(amd64, ["tinyproxy", "-v"]).stdout == f"tinyproxy {TINYPROXY_VERSION}\n"
    assert _run(amd64, ["nft", "--version"]).stdout.startswith("nftables v1.1.3 ")
    script = (
        f"id -u; id -g; busybox --list | while read -r a; do case ' {' '.join(APPLETS)} ' in *\" $a \"*) echo $a;; esac; done;"
        " printf 'hi\\n' | base64; timeout -s KILL 1 sleep 5; echo timeout $?"
    )
    done = _run(amd64, ["/bin/sh", "-c", script])
    assert done.stdout.splitlines() == ["61888", "61888", *sorted(APPLETS), "aGkK", "timeout 137"], done.stderr
    # Even root cannot write there: the root is read-only, as with readOnlyRootFilesystem (what the tests above ran in).
    write = _run(amd64, ["/bin/sh", "-c", ": >/x"], user="0:0")
    assert (write.returncode, write.stderr) == (1, "/bin/sh: can't create /x: Read-only file system\n")


def _conf_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir(mode=0o755)
    conf.chmod(0o755)
    for name, text in files.items():
        (conf / name).write_text(text)
        (conf / name).chmod(0o644)
    return conf


@contextlib.contextmanager
def _image_tinyproxy(image: Built, settings: Any, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The image's tinyproxy, read-only, as its user, with the rendered config and a resolver where nothing answers."""
    port = _free_port()
    conf = _conf_dir(
        tmp_path,
        {
            "tinyproxy.conf": with_port(tinyproxy_conf(settings, settings.allowed_sources()), port),
            "filter": tinyproxy_filter(settings),
            "resolv.conf": "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        },
    )
    log = tmp_path / "tinyproxy.log"
    binds = {"/etc/tinyproxy": conf, "/etc/resolv.conf": conf / "resolv.conf"}
    env = {"R": str(image.root), "PATH": IMAGE_PATH}
    argv = in_image(image, ["tinyproxy", "-d", "-c", "/etc/tinyproxy/tinyproxy.conf"], binds=binds)
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 5
        while True:
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            assert time.monotonic() < deadline, f"the image's tinyproxy did not start: {log.read_text()}"
            time.sleep(0.05)
        yield port, log
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_probe_pods_script_with_the_images_busybox_through_the_images_tinyproxy(
    amd64: Built, tmp_path: Path
) -> None:
    """The `check --probe` pod's script, byte for byte, run by the image's busybox as the image's user, through the
    image's tinyproxy with the rendered config; the transcripts judged as check judges a probe pod's log."""
    closed = _free_port()
    with (
        serving(_Tls(CONFIGURED, tmp_path)) as good,
        serving(_Tls(OTHER, tmp_path)) as bad,
        serving(_Http()) as plain,
    ):
        settings = _settings([good.port, bad.port, closed])
        urls = {
            "ok": f"https://127.0.0.1:{good.port}/",
            "tls": f"https://127.0.0.1:{bad.port}/",
            "filtered": "https://blocked.example/",
            "dns": "https://nothing.invalid/",
            "refused": f"https://127.0.0.1:{closed}/",
            "port": "https://127.0.0.1:1/",
            "http": f"http://127.0.0.1:{plain.port}/x",
        }
        targets = parse_targets(list(urls.values()))
        clients: dict[int, TlsClient] = {
            i: tls_client(t.host, settings.trusted_ca) for i, t in enumerate(targets) if t.scheme == "https"
        }
        hellos = [clients[i].hello if i in clients else None for i in range(len(targets))]
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        os.chown(scratch, 61888, 61888)
        with _image_tinyproxy(amd64, settings, tmp_path) as (port, log):
            script = pod_script(targets, hellos, port, WAIT)
            env = {"R": str(amd64.root), "PATH": IMAGE_PATH, "PROXY_HOST": "127.0.0.1"}
            argv = in_image(amd64, ["/bin/sh", "-c", script], binds={"/probe": scratch})
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT * 4)
            proxy_log = log.read_text(errors="replace")
    assert done.returncode == 0, done.stderr
    transcripts = parse_transcript(done.stdout, len(targets))
    assert transcripts is not None, done.stdout
    upstream = settings.proxy.upstream is not None  # configured, but every probed host is in its noUpstream
    outcome = {
        key: classify(
            "node-a", t, transcripts[i], wait=WAIT, tls=clients.get(i), proxy_log=proxy_log, upstream=upstream
        )
        for i, (key, t) in enumerate(zip(urls, targets, strict=True))
    }
    assert {key: r.outcome for key, r in outcome.items()} == {
        "ok": "ok",
        "tls": "tls-failure",
        "filtered": "filtered",
        "dns": "dns-failure",
        "refused": "connect-failed",
        "port": "not-allowed",
        "http": "ok",
    }, {key: r.detail for key, r in outcome.items()}
    assert outcome["ok"].detail == "TLSv1.3: the certificate verifies against proxy.upstream.trustedCa"
    assert outcome["http"].detail == "the origin answered HTTP/1.1 204 No Content"


def test_the_firewall_init_script_loads_the_rendered_table_with_the_images_nft(amd64: Built, tmp_path: Path) -> None:
    """The init container's command, as rendered, in a network namespace of its own, as root: the table is loaded
    with a rule for each of the pod's nameservers (an IPv6 one with its zone dropped) before the rejects, and
    Debian 12's nft 1.0.6 (the host's, as a node's kube-proxy has it) lists the ruleset without crashing."""
    settings = _settings([])
    conf = _conf_dir(
        tmp_path,
        {
            "nftables.conf": firewall_rules(settings),
            "resolv.conf": "search cluster.local\nnameserver 10.96.0.10\nnameserver fd00:10::a%eth0\n",
        },
    )
    command = firewall_command(settings)
    assert command[:2] == ["/bin/sh", "-c"]
    listing = f"{command[2]}\nnft list table inet {FIREWALL_TABLE}"
    binds = {"/etc/tinyproxy": conf, "/etc/resolv.conf": conf / "resolv.conf"}
    done = _run(amd64, ["/bin/sh", "-c", listing], user="0:0", binds=binds, net=True)
    assert done.returncode == 0, done.stderr
    rules = [line.strip() for line in done.stdout.splitlines() if "meta skuid" in line]
    assert rules[0].startswith("meta skuid 61888 ip6 daddr fd00:10::a tcp dport 53 counter"), rules
    assert rules[1].startswith("meta skuid 61888 ip daddr 10.96.0.10 tcp dport 53 counter"), rules
    verdicts = [rule.rsplit(" ", 1)[-1] if rule.endswith("accept") else "reject" for rule in rules]
    assert verdicts == sorted(verdicts), "\n".join(rules)  # every accept before the first reject
    # No declared set: only the rate meters (with their timeout), which nft 1.0.6 lists (the next test).
    assert sorted(re.findall(r"^\s*set (\S+) \{", done.stdout, re.M)) == ["rate4", "rate6"]


def test_the_hosts_older_nft_lists_the_table_the_images_nft_loaded(amd64: Built, tmp_path: Path) -> None:
    """A node's kube-proxy lists the ruleset with its own nft, older than the image's: Debian 12's 1.0.6 segfaulted
    on the named sets nft 1.1.3 had made (the resolvers', before they became rules). Loaded by the init container's
    command with the image's nft into a network namespace of the test's own, listed there with the host's nft."""
    settings = _settings([])
    conf = _conf_dir(
        tmp_path,
        {"nftables.conf": firewall_rules(settings), "resolv.conf": "nameserver 10.96.0.10\nnameserver fd00:10::a\n"},
    )
    binds = {"/etc/tinyproxy": conf, "/etc/resolv.conf": conf / "resolv.conf"}
    host_nft = subprocess.run(["nft", "--version"], capture_output=True, text=True, check=True).stdout
    assert host_nft.startswith("nftables v1.0."), host_nft
    name = f"pc-image-nft-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        env = {"R": str(amd64.root), "PATH": IMAGE_PATH}
        load = subprocess.run(
            ["ip", "netns", "exec", name, *in_image(amd64, firewall_command(settings), user="0:0", binds=binds)],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert load.returncode == 0, load.stderr
        listed = subprocess.run(["ip", "netns", "exec", name, "nft", "list", "ruleset"], capture_output=True, text=True)
        assert listed.returncode == 0, (listed.returncode, listed.stderr)
        assert "meta skuid 61888 ip daddr 10.96.0.10 tcp dport 53" in listed.stdout
        assert "meta skuid 61888 ip6 daddr fd00:10::a tcp dport 53" in listed.stdout
        rate = "update @rate4 { ip saddr timeout 1m limit rate over 100/second burst 200 packets }"
        assert rate in listed.stdout, listed.stdout
        assert "ct count" not in listed.stdout, listed.stdout  # tinyproxy counts the open connections (patch 0006)
        assert "tcp dport 8888 fib daddr type local goto tinyproxy-client-limits" in listed.stdout
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def test_the_arm64_programs_run_under_qemu_user(arm64: Built) -> None:
    built = arm64
    assert built.config["architecture"] == "arm64"
    qemu = shutil.which("qemu-aarch64")
    if qemu is None:
        pytest.fail("qemu-aarch64 is not on PATH: the arm64 image's programs run under it (apt-get install qemu-user)")
    root = str(built.root)
    run = [qemu, "-L", root]
    version = subprocess.run([*run, f"{root}/usr/bin/tinyproxy", "-v"], capture_output=True, text=True, timeout=60)
    assert version.stdout == f"tinyproxy {TINYPROXY_VERSION}\n", version.stderr
    busybox = [*run, f"{root}/usr/bin/busybox"]
    shell = subprocess.run([*busybox, "sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True, timeout=60)
    assert shell.stdout == "42\n", shell.stderr
    encoded = subprocess.run([*busybox, "base64"], input="hi\n", capture_output=True, text=True, timeout=60)
    assert encoded.stdout == "aGkK\n", encoded.stderr
    with (built.root / "usr/sbin/nft").open("rb") as nft:
        header = nft.read(20)
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


def test_the_index_archive_holds_both_architectures_under_the_default_reference(tmp_path: Path) -> None:
    """What the release workflow pushes (`skopeo copy --all`): one index naming the two manifests built above."""
    archive = _scripts_image("index")
    layout = tmp_path / "layout"
    layout.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(layout)], check=True)
    [entry] = json.loads((layout / "index.json").read_text())["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == DEFAULT_IMAGE
    assert entry["digest"] == (archive.parent / "digest").read_text().strip()
    nested = json.loads(_blob(layout, entry["digest"]).read_text())
    expected = {arch: (_scripts_image(arch).parent / "digest").read_text().strip() for arch in ("amd64", "arm64")}
    assert {m["platform"]["architecture"]: m["digest"] for m in nested["manifests"]} == expected
    for manifest in nested["manifests"]:
        assert _blob(layout, manifest["digest"]).is_file()


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[Path]:
    """A containerd of the test's own (its own root, state and socket; no CRI), stopped and its mounts gone after."""
    for tool in ("containerd", "ctr", "runc"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"{tool} is not on PATH: the image is imported and run by containerd (apt-get install containerd)"
            )
    base = Path(tempfile.mkdtemp(prefix="ctrd-", dir="/tmp"))  # a short path: the socket's must fit in 108 bytes
    config = base / "config.toml"
    config.write_text(
        f'version = 2\nroot = "{base}/root"\nstate = "{base}/state"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{base}/sock"\n'
    )
    log = (tmp_path / "containerd.log").open("wb")
    proc = subprocess.Popen(["containerd", "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not (base / "sock").exists():
            assert proc.poll() is None, (tmp_path / "containerd.log").read_text()
            assert time.monotonic() < deadline, "containerd did not start"
            time.sleep(0.1)
        yield base / "sock"
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
        subprocess.run(["umount", "-R", str(base / "state")], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_containerd_imports_both_archives_and_runs_the_image(containerd: Path, tmp_path: Path) -> None:
    """`ctr -n k8s.io images import`, as a node without a registry takes it, then a container of it under runc."""

    def ctr(*args: str) -> str:
        done = subprocess.run(["ctr", "-a", str(containerd), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    amd64 = _scripts_image("amd64")
    ctr("-n", "k8s.io", "images", "import", str(amd64))
    ctr("-n", "index", "images", "import", str(_scripts_image("index")))
    for namespace, archive in (("k8s.io", amd64), ("index", _scripts_image("index"))):
        listed = ctr("-n", namespace, "images", "ls", "-q")
        assert listed.split() == [DEFAULT_IMAGE]
        digest = (archive.parent / "digest").read_text().strip()
        assert digest in ctr("-n", namespace, "images", "ls")
    run = ctr("-n", "k8s.io", "run", "--rm", DEFAULT_IMAGE, f"t{os.getpid()}", "sh", "-c", "id; tinyproxy -v")
    assert run.splitlines() == [
        "uid=61888(tinyproxy) gid=61888(tinyproxy) groups=61888(tinyproxy)",
        f"tinyproxy {TINYPROXY_VERSION}",
    ]
