"""The code of earlier releases, taken from the git history at the commits `RELEASES.toml`
records (tags need not survive a clone; the recorded commit must be in the history).

`previous_release` picks the newest recorded release older than this one; `checkout` writes the
packages a node runs (``cmq``, ``raftlog``, ``api``) of that commit into a directory with
``git archive`` — a tree of its own, run with this checkout's interpreter and virtualenv on
``PYTHONPATH`` (as `tests.chaos.cluster.ChaosCluster` runs any code snapshot). That is the
previous release's code exactly; its third-party dependencies are this virtualenv's, which is
right as long as every dependency the old release declared is declared the same way here
(`same_dependencies` checks it, so the test says so instead of running the old code on
packages it never ran on; a dependency added since is installed too but never imported by the
old code).
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("cmq", "raftlog", "api")


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    commit: str


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def releases() -> list[Release]:
    """Every release recorded in ``RELEASES.toml``, oldest first."""
    data = tomllib.loads((REPO / "RELEASES.toml").read_text())
    out = [Release(str(r["version"]), str(r["commit"])) for r in data["release"]]
    return sorted(out, key=lambda r: _key(r.version))


def current_version() -> str:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return str(data["project"]["version"])


def previous_release() -> Release:
    """The newest recorded release older than this tree's version (it must have a commit)."""
    now = _key(current_version())
    older = [r for r in releases() if _key(r.version) < now and r.commit]
    if not older:
        raise LookupError("RELEASES.toml records no earlier release with a commit")
    return older[-1]


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True).stdout


def have_commit(commit: str) -> bool:
    """Whether this checkout's history holds ``commit`` (not so in a shallow clone)."""
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False
    return True


def checkout(commit: str, dest: Path) -> Path:
    """Write the node packages of ``commit`` under ``dest`` (for ``PYTHONPATH``)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = _git("archive", "--format=tar", commit, *PACKAGES)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def same_dependencies(commit: str) -> bool:
    """Whether every dependency ``commit``'s pyproject.toml declares is declared identically
    (name and version constraint) by this tree's: the old code then runs on the packages it
    ran on (this tree may depend on more)."""
    then = tomllib.loads(_git("show", f"{commit}:pyproject.toml").decode())
    now = tomllib.loads((REPO / "pyproject.toml").read_text())
    return declared_within(then["project"]["dependencies"], now["project"]["dependencies"])


def declared_within(then: list[str], now: list[str]) -> bool:
    """Whether every requirement of ``then`` appears, character for character, in ``now``."""
    return set(then) <= set(now)
