"""The container image's recipe, checked without a Docker engine: the Dockerfile is parsed
(dockerfile-parse) and its entry point, user, ports, volume and stop signal are compared with
what the `cmq` command really does and defaults to."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from cmq.cli import launch
from cmq.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(ROOT / "Dockerfile"))


def _final_stage(df: DockerfileParser) -> list[dict[str, str]]:
    stages: list[list[dict[str, str]]] = []
    for ins in df.structure:
        if ins["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    assert len(stages) >= 2, "a multi-stage build: the final image carries no build tools"
    return stages[-1]


def _stage(df: DockerfileParser, name: str) -> list[dict[str, str]]:
    """The instructions of the stage ``FROM ... AS name``."""
    stages: dict[str, list[dict[str, str]]] = {}
    current: list[dict[str, str]] = []
    for ins in df.structure:
        if ins["instruction"] == "FROM":
            current = []
            words = ins["value"].split()
            if len(words) == 3 and words[1].lower() == "as":
                stages[words[2]] = current
        current.append(ins)
    return stages[name]


def _values(stage: list[dict[str, str]], instruction: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == instruction]


def test_multi_stage_slim_python_base(dockerfile: DockerfileParser) -> None:
    froms = [i["value"] for i in dockerfile.structure if i["instruction"] == "FROM"]
    stages = {f.split()[2] for f in froms if len(f.split()) == 3}
    # Every base is the slim Python image, or an earlier stage built on it.
    bases = [f.split()[0] for f in froms]
    assert all(b in stages or re.match(r"python:3\.1[1-9]-slim", b) for b in bases), froms
    final = _final_stage(dockerfile)
    copies = _values(final, "COPY")
    assert any(c.startswith("--from=build") for c in copies), "the final stage copies the build"


def test_entry_point_is_the_cmq_script(dockerfile: DockerfileParser) -> None:
    final = _final_stage(dockerfile)
    entry = json.loads(_values(final, "ENTRYPOINT")[-1])
    cmd = json.loads(_values(final, "CMD")[-1])
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry == ["cmq"]
    assert scripts["cmq"] == "cmq.cli.main:main"
    assert cmd == ["serve"]
    # `serve` is a real subcommand of that entry point (argparse exits 0 on --help).
    with pytest.raises(SystemExit) as e:
        cli.main(["serve", "--help"])
    assert e.value.code == 0


def test_the_archive_target_has_the_archive_extra_and_a_java_runtime(
    dockerfile: DockerfileParser,
) -> None:
    """``docker build --target archive``: the image the chart's archive CronJob runs."""
    archive = _stage(dockerfile, "archive")
    assert re.match(r"python:3\.1[1-9]-slim", archive[0]["value"].split()[0])
    build = " ".join(_values(_stage(dockerfile, "build-archive"), "RUN"))
    assert "'.[otel-export,archive]'" in build
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {d.split(">")[0] for d in extras["archive"]} >= {"pyspark", "pyarrow"}
    assert any(c.startswith("--from=build-archive /opt/cmq") for c in _values(archive, "COPY"))
    runs = " ".join(_values(archive, "RUN"))
    jre = re.search(r"openjdk-(\d+)-jre-headless", runs)
    assert jre and int(jre.group(1)) >= 17, "PySpark 4 needs Java 17+"
    assert "--uid 10001" in runs and _values(archive, "USER")[-1] == "10001:10001"
    assert json.loads(_values(archive, "ENTRYPOINT")[-1]) == ["cmq"]
    # The node image stays the default target (the last stage) and carries no Spark.
    froms = [i["value"] for i in dockerfile.structure if i["instruction"] == "FROM"]
    assert " AS " not in froms[-1].upper()
    assert "--from=build " in " ".join(_values(_final_stage(dockerfile), "COPY")) + " "


def test_runs_as_a_non_root_user_created_in_the_image(dockerfile: DockerfileParser) -> None:
    final = _final_stage(dockerfile)
    user = _values(final, "USER")[-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric, so runAsNonRoot can verify it"
    runs = " ".join(_values(final, "RUN"))
    assert f"--uid {uid}" in runs, "the user exists in the image's passwd"


def test_ports_and_listen_addresses_match_the_cli_defaults(dockerfile: DockerfileParser) -> None:
    final = _final_stage(dockerfile)
    exposed = {int(p.split("/")[0]) for v in _values(final, "EXPOSE") for p in v.split()}
    assert exposed == {launch.DEFAULT_HTTP_PORT, launch.DEFAULT_PEER_PORT}
    env = dockerfile.envs
    # In a container the node listens on every interface, on the default ports.
    assert env["CMQ_HTTP"] == f"0.0.0.0:{launch.DEFAULT_HTTP_PORT}"
    assert env["CMQ_PEER"] == f"0.0.0.0:{launch.DEFAULT_PEER_PORT}"
    assert cli.DEFAULT_URL.endswith(f":{launch.DEFAULT_HTTP_PORT}")


def test_data_lives_under_the_volume(dockerfile: DockerfileParser) -> None:
    final = _final_stage(dockerfile)
    volumes = [v for raw in _values(final, "VOLUME") for v in json.loads(raw)]
    data_dir = dockerfile.envs["CMQ_DATA_DIR"]
    assert any(data_dir.startswith(v.rstrip("/") + "/") for v in volumes), (data_dir, volumes)
    runs = " ".join(_values(final, "RUN"))
    assert "chown cmq:cmq /var/lib/cmq" in runs, "the non-root user owns the volume's root"


def test_stop_signal_is_one_the_server_handles(dockerfile: DockerfileParser) -> None:
    final = _final_stage(dockerfile)
    stop = _values(final, "STOPSIGNAL")[-1]
    server = (ROOT / "cmq" / "cli" / "server.py").read_text()
    assert stop == "SIGTERM"
    assert "signal.SIGTERM" in server and "hand_off_leadership" in server


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "tests"} <= ignored
    for needed in ("cmq", "api", "raftlog", "pyproject.toml", "README.md"):
        assert needed not in ignored


def test_the_installed_package_ships_the_console(tmp_path: Path) -> None:
    """The image installs the project with `pip install .`: the wheel must carry /ui's files."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("cmq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    static = {p.name for p in (ROOT / "api" / "ui" / "static").iterdir()}
    assert {f"api/ui/static/{n}" for n in static} <= names
    assert {"cmq/cli/main.py", "cmq/cli/server.py", "api/app.py"} <= names
