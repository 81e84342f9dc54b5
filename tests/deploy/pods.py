"""Running a rendered pod spec as a local process, the way the kubelet would: the container's
command and args with Kubernetes' ``$(VAR)`` expansion, its environment resolved from the
downward API (pod name, namespace, labels, IP) and the rendered Secrets, and each volume mount
bound at its mount path in a private mount namespace (``ip netns exec`` makes one per process;
missing parents get a tmpfs there, so the host's filesystem is untouched)."""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_LABEL = re.compile(r"metadata\.labels\['([^']+)'\]")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of command, args and env values: ``$(NAME)`` becomes the value of
    an earlier-defined variable (left as is when undefined) and ``$$`` a literal ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _REF.sub(sub, text)


@dataclass(frozen=True)
class PodIdentity:
    name: str
    namespace: str
    ip: str
    labels: dict[str, str]


def resolve_env(
    container: dict[str, Any], pod: PodIdentity, secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The container's environment in order, as the kubelet builds it (only the sources the
    chart uses are known; any other fails loudly)."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(str(var["value"]), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            label = _LABEL.fullmatch(path)
            if path == "metadata.name":
                env[var["name"]] = pod.name
            elif path == "metadata.namespace":
                env[var["name"]] = pod.namespace
            elif path == "status.podIP":
                env[var["name"]] = pod.ip
            elif label:
                env[var["name"]] = pod.labels.get(label.group(1), "")
            else:
                raise AssertionError(f"unsupported fieldRef {path}")
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[var["name"]] = secrets[ref["name"]][ref["key"]]
        else:
            raise AssertionError(f"unsupported env source {source}")
    return env


def secrets_of(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        d["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in d["data"].items()}
        for d in docs
        if d["kind"] == "Secret"
    }


def mount_wrapper(mounts: dict[str, Path]) -> list[str]:
    """A shell prefix binding each host directory at its mount path (a tmpfs on the deepest
    existing ancestor of a missing mount path, inside this process's mount namespace only)."""
    roots: set[str] = set()
    for target in mounts:
        if not os.path.isdir(target):
            anc = os.path.dirname(target)
            while not os.path.isdir(anc):
                anc = os.path.dirname(anc)
            roots.add(anc)
    steps = ["set -e"]
    steps += [f"mount -t tmpfs cmq-pod {shlex.quote(r)}" for r in sorted(roots)]
    sources = [str(s) for s in mounts.values()]

    def hides_a_source(target: str) -> bool:
        return any(s.startswith(target.rstrip("/") + "/") for s in sources)

    # A mount over a directory that holds other mounts' sources (e.g. /tmp) goes last.
    for target, source in sorted(mounts.items(), key=lambda m: (hides_a_source(m[0]), m[0])):
        steps.append(f"mkdir -p {shlex.quote(target)}")
        steps.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(target)}")
    steps.append('exec "$@"')
    return ["/bin/sh", "-c", "; ".join(steps), "mounts"]


def container_argv(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    return [expand(a, env) for a in container.get("command", []) + container.get("args", [])]


def image_path() -> str:
    """PATH of the image (``/opt/cmq/bin`` first) mapped to this checkout's virtualenv."""
    return f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"


def start_in_netns(
    ns: str,
    argv: list[str],
    env: dict[str, str],
    mounts: dict[str, Path],
    log: IO[bytes],
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in namespace ``ns`` with exactly ``env`` (plus the image's PATH and a
    HOME) and ``mounts``; ``ip netns exec`` and the wrapper shell exec into it, so the returned
    process is the container's process itself."""
    full_env = {"PATH": image_path(), "HOME": "/tmp", **env}
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, *mount_wrapper(mounts), *argv],
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
