"""The promtool binary for the alert-rule checks, from Debian's ``prometheus`` package.

``apt-get download`` fetches the package file from the configured Debian archive (no install, no
root, no service started) and ``dpkg-deb --fsys-tarfile`` yields its ``./usr/bin/promtool``,
which is copied into the virtualenv's ``bin``. ``make test`` runs this (`python -m
tests.deploy.promtoolbin`); the tests call `ensure_promtool` too, so a direct pytest run works.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "prometheus"
MEMBER = "./usr/bin/promtool"
MIN_VERSION = (2, 40)
"""``promtool test rules`` as the tests use it (promql_expr_test, alert_rule_test) needs 2.x."""


class PromtoolUnavailable(RuntimeError):
    """No promtool here and no Debian archive to fetch it from (not a Debian-like host)."""


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def ensure_promtool(bin_dir: Path | None = None) -> Path:
    """The path of a working promtool (at least `MIN_VERSION`) in ``bin_dir`` (default: this
    Python's bin directory), extracted from Debian's `PACKAGE` when missing.

    Raises `PromtoolUnavailable` when apt-get or dpkg-deb is absent."""
    target = (bin_dir or _venv_bin()) / "promtool"
    if target.exists() and _version(target) >= MIN_VERSION:
        return target
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise PromtoolUnavailable("promtool needs apt-get and dpkg-deb (a Debian-like host)")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)  # apt's _apt user downloads into it when run as root
        got = _download(tmp)
        if got.returncode != 0 and os.geteuid() == 0:  # no package lists yet: fetch them once
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=False)
            got = _download(tmp)
        debs = list(Path(tmp).glob(f"{PACKAGE}_*.deb"))
        if not debs:
            raise PromtoolUnavailable(f"apt-get download {PACKAGE} failed: {got.stderr.strip()}")
        fs = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(debs[0])], capture_output=True, check=True
        )
        tar_path = Path(tmp) / "data.tar"
        tar_path.write_bytes(fs.stdout)
        with tarfile.open(tar_path) as tar:
            src = tar.extractfile(MEMBER)
            if src is None:
                raise PromtoolUnavailable(f"{MEMBER} not in {debs[0].name}")
            part = target.with_suffix(".part")
            with src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst)
    os.chmod(part, 0o755)
    part.replace(target)
    if _version(target) < MIN_VERSION:
        raise PromtoolUnavailable(f"{target} is older than {MIN_VERSION}")
    return target


def _download(into: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", "download", "-q", PACKAGE],
        cwd=into,
        capture_output=True,
        text=True,
        check=False,
    )


def _version(promtool: Path) -> tuple[int, ...]:
    """``(major, minor)`` from ``promtool --version``; ``()`` when it does not run."""
    try:
        out = subprocess.run(
            [str(promtool), "--version"], capture_output=True, text=True, check=False
        )
    except OSError:
        return ()
    words = (out.stdout + out.stderr).split()
    for i, w in enumerate(words[:-1]):
        if w == "version":
            head = words[i + 1].split("+")[0].split(".")[:2]
            if all(p.isdigit() for p in head):
                return tuple(int(p) for p in head)
    return ()


if __name__ == "__main__":
    path = ensure_promtool()
    print(path, ".".join(map(str, _version(path))))
