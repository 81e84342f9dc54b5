"""The chart boots a real cluster: the StatefulSet rendered by helm for 3 replicas is run the
way Kubernetes would run it, one process per pod, each in a network namespace of its own with
the pods' DNS names resolving to their addresses and each pod labelled with its node's zone
(three zones, reaching the node as CMQ_ZONE); then the `helm test` hook's command is run, from
a client namespace, against the client Service's name and port.

Then the archive CronJob's container (rendered with ``archive.enabled``) is run once, from the
client namespace, exactly as rendered (command, args, environment, the image's ENV from the
Dockerfile's ``archive`` target, its volume at its mount path): it archives a released segment
of 64 MiB (the nodes' default segment size) of a queue with ``archive=true``, every message once
and byte-identical, signed with the credential derived from the cluster secret.

Then the cluster is scaled 3 -> 5 -> 3 the way `helm upgrade --set replicaCount=...` does it:
the chart rendered for 5 replicas (the same pod template: no running pod restarts) adds pods 3
and 4, started with exactly their rendered configuration (they join through the founders);
once they hold replicas, the chart rendered back for 3 replicas gives the pre-upgrade hook Job,
whose command drains and removes nodes 4 and 5; then the StatefulSet's scale-down stops their
pods. A producer/consumer load runs throughout and must lose nothing.

Nothing of the configuration is written by the test: command, args and environment come from
the rendered manifests (the image's own ENV from the Dockerfile), the cluster secret from the
rendered Secret, and each volume mount is a fresh directory bound at its mount path. The one
Secret the chart does not create, the peer TLS certificate (on by default), is made here from a
throwaway CA, as cert-manager would: one certificate for every pod, with ``tls.crt``,
``tls.key`` and ``ca.crt``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from cmq.catalog.keys import cluster_credential
from tests.archive.conftest import JAVA
from tests.archive.output import manifests, rows
from tests.deploy.chart import one, render
from tests.deploy.netns import PodNetwork
from tests.deploy.pods import (
    PodIdentity,
    container_argv,
    image_path,
    resolve_env,
    secrets_of,
    start_in_netns,
)
from tests.tlsca import TestCA

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RELEASE, NAMESPACE, REPLICAS = "boot", "cmq-boot", 3
SCALE_LOAD = "tests.deploy.scale_load"
ARCHIVE_LOAD = "tests.deploy.archive_load"
ZONES = ("zone-a", "zone-b", "zone-c")

READY_SCRIPT = """
import json, sys, time, urllib.request
urls = sys.argv[1:]
deadline = time.monotonic() + 60
def get(url):
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status, json.load(r)
while True:
    try:
        if all(get(u + "/readyz")[0] == 200 for u in urls):
            break
    except Exception as e:
        last = e
    if time.monotonic() > deadline:
        sys.exit(f"not ready: {last}")
    time.sleep(0.3)
from cmq.client import SyncClient
for u in urls:
    with SyncClient(u, timeout=5) as c:
        st = c.status()
    leaders = sorted({g["leader"] for g in st["groups"].values()})
    print(f"{u}: node {st['node']} ready, leaders of its groups: {leaders}")
"""


@pytest.fixture
def network() -> Iterator[PodNetwork]:
    why = PodNetwork.available()
    if why:
        pytest.skip(why)
    net = PodNetwork()
    try:
        net.open()
        yield net
    finally:
        net.close()


def _image_env() -> dict[str, str]:
    env = dict(DockerfileParser(path=str(ROOT / "Dockerfile")).envs)
    env.pop("PATH", None)  # the image's PATH is mapped to this checkout's virtualenv
    return env


def _pod_labels(sts: dict[str, Any], pod: str, ordinal: int) -> dict[str, str]:
    labels = dict(sts["spec"]["template"]["metadata"]["labels"])
    labels["statefulset.kubernetes.io/pod-name"] = pod
    labels["apps.kubernetes.io/pod-index"] = str(ordinal)
    # The zone of the pod's node, as Kubernetes copies it onto the pod (three zones).
    labels["topology.kubernetes.io/zone"] = ZONES[ordinal % len(ZONES)]
    return labels


def _peer_tls(tmp_path: Path) -> Path:
    """The peer TLS Secret's files (``tls.crt``, ``tls.key``, ``ca.crt``) from a throwaway CA:
    one certificate for every pod, as in the chart README."""
    ca = TestCA(tmp_path / "peer-ca")
    cert, key = ca.issue("peer")
    files = tmp_path / "peer-tls-secret"
    files.mkdir()
    (files / "tls.crt").write_bytes(cert.read_bytes())
    (files / "tls.key").write_bytes(key.read_bytes())
    (files / "ca.crt").write_bytes(ca.ca_file.read_bytes())
    return files


@dataclass
class Pods:
    """The StatefulSet's pods as processes: `start` runs pod ``ordinal`` of a rendered
    StatefulSet in a namespace of its own (created here, its DNS name added to every hosts
    file), with its volumes as fresh directories under ``root``."""

    network: PodNetwork
    root: Path
    secrets: dict[str, dict[str, str]]
    domain: str
    secret_dirs: dict[str, Path] = field(default_factory=dict)
    """Secrets the chart mounts but does not create, by name: a directory of their files."""
    ns: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)

    def add(self, sts: dict[str, Any], ordinals: range) -> list[str]:
        pods = [f"{sts['metadata']['name']}-{i}" for i in ordinals]
        for pod in pods:
            self.ns[pod] = self.network.add(pod)
            host = f"{pod}.{sts['spec']['serviceName']}.{self.domain}"
            self.network.names[host] = self.network.addresses[self.ns[pod]]
        self.network.write_hosts()  # rewritten in place: running pods resolve the new names
        return pods

    def start(self, sts: dict[str, Any], ordinal: int) -> None:
        pod = f"{sts['metadata']['name']}-{ordinal}"
        spec = sts["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
        empty_dirs = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        secret_volumes = {
            v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v
        }
        address = self.network.addresses[self.ns[pod]]
        identity = PodIdentity(pod, NAMESPACE, address, _pod_labels(sts, pod, ordinal))
        env = _image_env() | resolve_env(container, identity, self.secrets)
        mounts: dict[str, Path] = {}
        for m in container["volumeMounts"]:
            if m["name"] in secret_volumes:
                mounts[m["mountPath"]] = self.secret_dirs[secret_volumes[m["name"]]]
                continue
            assert m["name"] in claims | empty_dirs, m
            if m["name"] in empty_dirs and _hides_this_python(m["mountPath"]):
                continue  # scratch space (/tmp) over this checkout's virtualenv: skipped
            source = self.root / pod / m["name"]
            source.mkdir(parents=True)
            mounts[m["mountPath"]] = source
        argv = container_argv(container, env)
        print(f"{pod} at {address}: {' '.join(' '.join(argv).split())}")
        log = open(self.root / f"{pod}.log", "wb")  # noqa: SIM115 - owned by the process
        self.procs[pod] = start_in_netns(self.ns[pod], argv, env, mounts, log)

    def stop(self, pods: list[str]) -> None:
        """SIGTERM every pod at once (what the kubelet does for a `Parallel` StatefulSet's
        scale-down or deletion), then wait; SIGKILL after 20 s (the grace period), recorded in
        `killed`."""
        for pod in pods:
            self.procs[pod].send_signal(signal.SIGTERM)
        for pod in pods:
            try:
                self.procs[pod].wait(20)
            except subprocess.TimeoutExpired:
                self.killed.add(pod)
                self.procs[pod].kill()
                self.procs[pod].wait()


def test_rendered_statefulset_boots_scales_3_5_3_and_passes_the_helm_test_hook(
    network: PodNetwork, tmp_path: Path
) -> None:
    docs = render({"replicaCount": str(REPLICAS)}, release=RELEASE, namespace=NAMESPACE)
    sts = one(docs, "StatefulSet")
    fullname = sts["metadata"]["name"]
    headless = sts["spec"]["serviceName"]
    client_svc = one(docs, "Service", fullname)
    hook = one(docs, "Pod", "-test")
    # The Secret is created once and kept across upgrades (lookup): every render uses it.
    secrets = secrets_of(docs)
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    http_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")
    domain = f"{NAMESPACE}.svc.cluster.local"
    cluster = Pods(
        network, tmp_path, secrets, domain, {f"{fullname}-peer-tls": _peer_tls(tmp_path)}
    )

    pods = cluster.add(sts, range(REPLICAS))
    # The test's own clients sign with the credential derived from the rendered cluster secret
    # (as the chart's hooks do).
    cluster_env = resolve_env(container, PodIdentity(pods[0], NAMESPACE, "", {}), secrets)
    key_id, key_secret = cluster_credential(cluster_env["CMQ_SECRET"].encode())
    key_env = {"CMQ_ACCESS_KEY_ID": key_id, "CMQ_SECRET_ACCESS_KEY": key_secret}
    client_ns = network.add("client")
    # The client Service: a virtual address in front of the ready pods; here, pod 0's.
    network.names[f"{fullname}.{domain}"] = network.addresses[cluster.ns[pods[0]]]
    network.write_hosts()
    urls = [f"http://{pod}.{headless}.{domain}:{http_port}" for pod in pods]

    load: subprocess.Popen[str] | None = None
    archived = JAVA is not None and JAVA >= 17
    try:
        for ordinal in range(REPLICAS):
            cluster.start(sts, ordinal)
        ready = _run_in(client_ns, ["python", "-c", READY_SCRIPT, *urls], key_env, tmp_path)
        print(ready.stdout)
        assert ready.returncode == 0, ready.stdout + ready.stderr + _logs(tmp_path, pods)
        for ordinal, pod in enumerate(pods):
            assert f"{pod}.{headless}.{domain}:{http_port}: node {ordinal + 1} ready" in (
                ready.stdout
            )

        # The helm test hook, exactly as rendered, against the client Service's name and port.
        (test_container,) = hook["spec"]["containers"]
        test_env = resolve_env(
            test_container, PodIdentity(hook["metadata"]["name"], NAMESPACE, "", {}), secrets
        )
        assert test_env["CMQ_URL"] == (
            f"http://{fullname}.{domain}:{client_svc['spec']['ports'][0]['port']}"
        )
        out = _run_in(client_ns, container_argv(test_container, test_env), test_env, tmp_path)
        print(out.stdout, out.stderr)
        assert out.returncode == 0, out.stdout + out.stderr + _logs(tmp_path, pods)
        assert "round trip ok" in out.stdout

        # -- the archive CronJob, as rendered, against the client Service ------------------
        # (its image brings a JRE; here the machine's Java runs Spark, if it has Java 17+)
        if archived:
            _run_archive_cronjob(client_ns, secrets, tmp_path, key_env, urls)

        # -- scale 3 -> 5 -> 3 under load ------------------------------------------------------
        load = subprocess.Popen(
            ["ip", "netns", "exec", client_ns, "python", "-m", SCALE_LOAD, "load", *urls],
            cwd=ROOT,
            env={"PATH": image_path(), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), **key_env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert load.stdout is not None
        started = load.stdout.readline()
        assert started.startswith("load started"), started + load.stdout.read()

        # helm upgrade --set replicaCount=5: the same pod template, two more pods.
        sts5 = one(
            render({"replicaCount": "5"}, release=RELEASE, namespace=NAMESPACE), "StatefulSet"
        )
        assert sts5["spec"]["replicas"] == 5
        assert sts5["spec"]["template"] == sts["spec"]["template"], "running pods would restart"
        added = cluster.add(sts5, range(REPLICAS, 5))
        for ordinal in range(REPLICAS, 5):
            cluster.start(sts5, ordinal)
        joined = _in_client(
            client_ns,
            SCALE_LOAD,
            ["wait-joined", str(REPLICAS), *urls],
            tmp_path,
            key_env,
            timeout=120,
        )
        print(joined.stdout, joined.stderr)
        everyone = [*pods, *added]
        assert joined.returncode == 0, joined.stdout + joined.stderr + _logs(tmp_path, everyone)
        # Registered at their stable DNS names (what the other nodes dial), in their zones.
        for node, pod in enumerate(everyone, start=1):
            zone = ZONES[(node - 1) % len(ZONES)]
            assert f"node {node} {pod}.{headless}.{domain}:" in joined.stdout, joined.stdout
            assert f"node {node} zone={zone} " in joined.stdout, joined.stdout

        # helm upgrade --set replicaCount=3: the pre-upgrade hook drains and removes nodes 4
        # and 5 (its command exactly as rendered), then the StatefulSet stops pods 3 and 4.
        down = render({"replicaCount": str(REPLICAS)}, release=RELEASE, namespace=NAMESPACE)
        job = one(down, "Job", "-scaledown")
        (job_container,) = job["spec"]["template"]["spec"]["containers"]
        job_env = resolve_env(
            job_container, PodIdentity(job["metadata"]["name"], NAMESPACE, "", {}), secrets
        )
        drained = _run_in(client_ns, container_argv(job_container, job_env), job_env, tmp_path)
        print(drained.stdout, drained.stderr)
        assert drained.returncode == 0, drained.stdout + drained.stderr + _logs(tmp_path, everyone)
        assert "nodes [4, 5] drained and removed" in drained.stdout
        left = _in_client(
            client_ns, SCALE_LOAD, ["nodes", str(REPLICAS), *urls], tmp_path, key_env, timeout=120
        )
        assert left.returncode == 0, left.stdout + left.stderr
        cluster.stop(added)

        load.stdin.write("stop\n")  # type: ignore[union-attr]
        load.stdin.flush()  # type: ignore[union-attr]
        rest, _ = load.communicate(timeout=90)
        print(rest)
        assert load.returncode == 0, rest + _logs(tmp_path, everyone)
        outcome = json.loads(next(x for x in reversed(rest.splitlines()) if x.startswith("{")))
        assert outcome["lost"] == 0 and outcome["redelivered_after_ack"] == 0, outcome
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        cluster.stop([p for p, proc in cluster.procs.items() if proc.poll() is None])
    # Every pod stopped on SIGTERM within the grace period, through the orderly path. Only the
    # scaled-down pods must have led nothing when they stopped: they were drained first. The
    # final teardown stops the remaining pods all at once, as deleting a `Parallel` StatefulSet
    # does, so their hand-offs race each other and the last to go has no live peer to hand to;
    # a single node's hand-off on SIGTERM is asserted exactly in test_handoff.py.
    assert not cluster.killed, cluster.killed
    for pod in cluster.procs:
        log = (tmp_path / f"{pod}.log").read_text()
        assert "stopping; groups still led here:" in log, log[-2000:]
        assert cluster.procs[pod].returncode == 0, (pod, cluster.procs[pod].returncode)
    for pod in added:
        log = (tmp_path / f"{pod}.log").read_text()
        assert "groups still led here: 0" in log, log[-2000:]
    if not archived:
        pytest.skip(f"the archive CronJob step needs Java 17+ (found: {JAVA}); the rest passed")


def _archive_image_env() -> dict[str, str]:
    """The ENV of the Dockerfile's ``archive`` stage (PATH left out: mapped to this checkout's
    virtualenv, as for the node image)."""
    env: dict[str, str] = {}
    stage = ""
    for ins in DockerfileParser(path=str(ROOT / "Dockerfile")).structure:
        if ins["instruction"] == "FROM":
            stage = ins["value"].split()[-1]
        elif ins["instruction"] == "ENV" and stage == "archive":
            env |= dict(kv.split("=", 1) for kv in ins["value"].split())
    env.pop("PATH", None)
    return env


def _run_archive_cronjob(
    client_ns: str,
    secrets: dict[str, dict[str, str]],
    tmp_path: Path,
    key_env: dict[str, str],
    urls: list[str],
) -> None:
    """Fill a segment of an ``archive=true`` queue until it is released, run the CronJob's
    container once (local Spark, as by default), and check what it archived."""
    docs = render(
        {"replicaCount": str(REPLICAS), "archive.enabled": "true"},
        release=RELEASE,
        namespace=NAMESPACE,
    )
    cron = one(docs, "CronJob")
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    queue = f"archived-{uuid.uuid4().hex[:8]}"
    filled = _in_client(client_ns, ARCHIVE_LOAD, ["fill", queue, *urls], tmp_path, key_env)
    assert filled.returncode == 0, filled.stdout + filled.stderr
    load = json.loads(filled.stdout.splitlines()[-1])
    released = {s["first_seq"]: s["count"] for s in load["released"]}

    env = _archive_image_env() | resolve_env(
        container, PodIdentity(f"{cron['metadata']['name']}-job", NAMESPACE, "", {}), secrets
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts: dict[str, Path] = {}
    for m in container["volumeMounts"]:
        if "emptyDir" in volumes[m["name"]] and _hides_this_python(m["mountPath"]):
            continue
        assert {"emptyDir", "persistentVolumeClaim"} & set(volumes[m["name"]]), m
        mounts[m["mountPath"]] = tmp_path / "archive-job" / m["name"]
        mounts[m["mountPath"]].mkdir(parents=True)
    argv = container_argv(container, env)
    print(f"archive job: {' '.join(argv)}")
    # The image's cmq is this checkout (the virtualenv may hold another one in development).
    job_env = {**env, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "archive-job.log", "wb") as log:
        job = start_in_netns(client_ns, argv, job_env, mounts, log)
        try:
            job.wait(600)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    out = (tmp_path / "archive-job.log").read_text(errors="replace")
    print(out[-2000:])
    assert job.returncode == 0, out[-6000:]

    # What the volume holds: every message of the released segments once, byte-identical.
    (claim,) = [m for m in container["volumeMounts"] if m["name"] == "archive"]
    volume = mounts[claim["mountPath"]]
    got = rows(volume)
    assert len(got) == sum(released.values()) and len({r["seq"] for r in got}) == len(got)
    for r in got:
        assert hashlib.sha256(r["body"]).hexdigest() == load["digests"][r["id"]], r["seq"]
    (manifest,) = manifests(volume)
    assert {s["first_seq"] for s in manifest["segments"]} == set(released)
    after = _in_client(client_ns, ARCHIVE_LOAD, ["released", queue, *urls], tmp_path, key_env)
    assert after.returncode == 0, after.stdout + after.stderr
    left = {s["first_seq"] for s in json.loads(after.stdout.splitlines()[-1])["released"]}
    assert not left & set(released), "archived segments are no longer released"


def _in_client(
    ns: str,
    module: str,
    args: list[str],
    tmp_path: Path,
    env: dict[str, str],
    *,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` of this checkout in namespace ``ns`` with ``env`` added."""
    return _run_in(
        ns,
        ["python", "-m", module, *args],
        {"PYTHONPATH": str(ROOT), **env},
        tmp_path,
        timeout=timeout,
        cwd=ROOT,
    )


def _hides_this_python(mount_path: str) -> bool:
    """Whether a mount at ``mount_path`` would hide the interpreter or the checkout the
    "image" is made of here (e.g. a clone under /tmp)."""
    prefix = mount_path.rstrip("/") + "/"
    return any(str(p).startswith(prefix) for p in (Path(sys.prefix), ROOT))


def _run_in(
    ns: str,
    argv: list[str],
    env: dict[str, str],
    tmp_path: Path,
    *,
    timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``argv`` in namespace ``ns`` with the image's PATH, HOME ``tmp_path`` and ``env``."""
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv],
        cwd=cwd,
        env={"PATH": image_path(), "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _logs(tmp_path: Path, pods: list[str]) -> str:
    out = []
    for pod in pods:
        with contextlib.suppress(OSError):
            out.append(f"--- {pod}\n" + (tmp_path / f"{pod}.log").read_text()[-3000:])
    return "\n".join(out)
