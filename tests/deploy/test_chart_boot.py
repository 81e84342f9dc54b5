"""The chart boots a real cluster: the StatefulSet rendered by helm for 3 replicas is run the
way Kubernetes would run it, one process per pod, each in a network namespace of its own with
the pods' DNS names resolving to their addresses; then the `helm test` hook's command is run,
from a client namespace, against the client Service's name and port.

Nothing of the configuration is written by the test: command, args and environment come from
the rendered manifests (the image's own ENV from the Dockerfile), the cluster secret from the
rendered Secret, and each volume mount is a fresh directory bound at its mount path.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

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

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RELEASE, NAMESPACE, REPLICAS = "boot", "cmq-boot", 3

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
for u in urls:
    st = get(u + "/v1/status")[1]
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
    return labels


def test_rendered_statefulset_boots_and_passes_the_helm_test_hook(
    network: PodNetwork, tmp_path: Path
) -> None:
    docs = render({"replicaCount": str(REPLICAS)}, release=RELEASE, namespace=NAMESPACE)
    sts = one(docs, "StatefulSet")
    fullname = sts["metadata"]["name"]
    headless = sts["spec"]["serviceName"]
    client_svc = one(docs, "Service", fullname)
    hook = one(docs, "Pod", "-test")
    secrets = secrets_of(docs)
    spec = sts["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    empty_dirs = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
    http_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")

    pods = [f"{fullname}-{i}" for i in range(REPLICAS)]
    pod_ns = {pod: network.add(pod) for pod in pods}
    client_ns = network.add("client")
    domain = f"{NAMESPACE}.svc.cluster.local"
    for pod in pods:
        address = network.addresses[pod_ns[pod]]
        network.names[f"{pod}.{headless}.{domain}"] = address
    # The client Service: a virtual address in front of the ready pods; here, pod 0's.
    network.names[f"{fullname}.{domain}"] = network.addresses[pod_ns[pods[0]]]
    network.write_hosts()

    procs: list[subprocess.Popen[bytes]] = []
    try:
        for ordinal, pod in enumerate(pods):
            identity = PodIdentity(
                pod, NAMESPACE, network.addresses[pod_ns[pod]], _pod_labels(sts, pod, ordinal)
            )
            env = _image_env() | resolve_env(container, identity, secrets)
            mounts: dict[str, Path] = {}
            for m in container["volumeMounts"]:
                assert m["name"] in claims | empty_dirs, m
                if m["name"] in empty_dirs and _hides_this_python(m["mountPath"]):
                    continue  # scratch space (/tmp) over this checkout's virtualenv: skipped
                source = tmp_path / pod / m["name"]
                source.mkdir(parents=True)
                mounts[m["mountPath"]] = source
            argv = container_argv(container, env)
            shown = " ".join(" ".join(argv).split())
            print(f"{pod} at {network.addresses[pod_ns[pod]]}: {shown}")
            log = open(tmp_path / f"{pod}.log", "wb")  # noqa: SIM115 - owned by the process
            procs.append(start_in_netns(pod_ns[pod], argv, env, mounts, log))

        urls = [f"http://{pod}.{headless}.{domain}:{http_port}" for pod in pods]
        ready = _run_in(client_ns, ["python", "-c", READY_SCRIPT, *urls], {}, tmp_path)
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
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    for pod in pods:
        log = (tmp_path / f"{pod}.log").read_text()
        assert "groups still led here: 0" in log, log[-2000:]


def _hides_this_python(mount_path: str) -> bool:
    """Whether a mount at ``mount_path`` would hide the interpreter or the checkout the
    "image" is made of here (e.g. a clone under /tmp)."""
    prefix = mount_path.rstrip("/") + "/"
    return any(str(p).startswith(prefix) for p in (Path(sys.prefix), ROOT))


def _run_in(
    ns: str, argv: list[str], env: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv],
        env={"PATH": image_path(), "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _logs(tmp_path: Path, pods: list[str]) -> str:
    out = []
    for pod in pods:
        with contextlib.suppress(OSError):
            out.append(f"--- {pod}\n" + (tmp_path / f"{pod}.log").read_text()[-3000:])
    return "\n".join(out)
