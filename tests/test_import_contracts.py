"""The import-linter contracts of pyproject.toml bite: each planted violation, in a throwaway copy
of the tree, makes ``lint-imports`` fail on that contract; the declared exceptions do not.

``make lint`` runs the contracts on the real tree; these tests guard the contracts themselves (a
typo in a module name, or a wildcard that matches nothing, would otherwise keep them green).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="lint-imports not installed (pip install -e '.[dev]')"
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the production packages and pyproject.toml (no caches)."""
    for pkg in ("raftlog", "cmq", "api"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(tree: Path, module: str, source: str) -> None:
    """Write ``source`` as ``module`` (``a.b.c`` → ``a/b/c.py``), creating packages as needed;
    appended when the module exists."""
    path = tree.joinpath(*module.split(".")).with_suffix(".py")
    for parent in reversed(path.relative_to(tree).parents[:-1]):
        init = tree / parent / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text("")
    with path.open("a") as f:
        f.write("\n" + source + "\n")


def lint(tree: Path, contract: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--contract", contract],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_broken(tree: Path, contract: str, *expected: str) -> None:
    out = lint(tree, contract)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "BROKEN" in out.stdout, out.stdout + out.stderr
    for text in expected:
        assert text in out.stdout, out.stdout


def assert_kept(tree: Path, contract: str) -> None:
    out = lint(tree, contract)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "KEPT" in out.stdout


CONTRACTS = [
    "raftlog-standalone",
    "core-pure",
    "raftlog-layers",
    "raftlog-face",
    "contract-bottom",
    "queue-below-http",
    "no-simulator-in-production",
    "cmq-layers",
    "client-only-http",
    "archive-outside-server",
    "archive-http-client",
    "backup-http-client",
    "api-service-surface",
    "sqs-pure",
    "sqs-via-service",
    "redrive-over-service",
    "native-api-without-sqs",
    "auth-pure",
    "sim-pure",
    "fsm-pure",
]


@pytest.mark.parametrize("contract", CONTRACTS)
def test_every_contract_holds_on_an_unchanged_copy(tree: Path, contract: str) -> None:
    assert_kept(tree, contract)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("cmq.catalog.planted", "cmq.routing.router"),  # the catalog below routing
        ("cmq.routing.planted", "cmq.node.queue_node"),  # routing below the node
        ("cmq.fsm.planted", "cmq.catalog.meta"),  # the state machine below the catalog
        ("cmq.node.planted", "cmq.cli.main"),  # the node below the command line
        ("cmq.upgrade.planted", "cmq.fsm.machine"),  # release facts and the fsm side by side
    ],
)
def test_a_part_importing_a_part_above_it_is_caught(
    tree: Path, importer: str, imported: str
) -> None:
    plant(tree, importer, f"import {imported}")
    assert_broken(tree, "cmq-layers", importer)


@pytest.mark.parametrize("imported", ["cmq.node.queue_node", "cmq.routing.rpc", "raftlog.core"])
def test_the_client_reaching_the_server_is_caught(tree: Path, imported: str) -> None:
    plant(tree, "cmq.client.planted", f"import {imported}")
    assert_broken(tree, "client-only-http", f"cmq.client.planted -> {imported}")


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("raftlog.storage.planted", "raftlog.transport.codec"),  # storage and transport apart
        ("raftlog.transport.planted", "raftlog.runtime.host"),  # the transport below the runtime
        ("raftlog.runtime.planted", "raftlog.sim.network"),  # the runtime below the simulators
    ],
)
def test_a_raftlog_part_importing_one_above_or_beside_it_is_caught(
    tree: Path, importer: str, imported: str
) -> None:
    plant(tree, importer, f"import {imported}")
    assert_broken(tree, "raftlog-layers", importer)


@pytest.mark.parametrize(
    "imported", ["raftlog.runtime.host", "raftlog.transport.peer", "raftlog.storage.wal"]
)
def test_the_queue_reaching_past_raftlogs_face_is_caught(tree: Path, imported: str) -> None:
    plant(tree, "cmq.node.planted", f"from {imported} import *  # noqa")
    assert_broken(tree, "raftlog-face", f"cmq.node.planted -> {imported}")


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("cmq.model", "cmq.routing.router"),
        ("cmq.errors", "raftlog.errors"),
        ("cmq.service", "cmq.node"),
    ],
)
def test_the_contract_modules_reaching_up_are_caught(
    tree: Path, importer: str, imported: str
) -> None:
    plant(tree, importer, f"import {imported}")
    assert_broken(tree, "contract-bottom", f"{importer} -> {imported}")


@pytest.mark.parametrize("imported", ["time", "os.path", "asyncio", "random", "threading"])
def test_core_doing_io_is_caught(tree: Path, imported: str) -> None:
    plant(tree, "raftlog.core.planted", f"import {imported}")
    assert_broken(tree, "core-pure", "raftlog.core.planted")


@pytest.mark.parametrize(
    ("importer", "imported", "reported"),
    [
        ("cmq.planted", "raftlog.sim.runtime_sim", "raftlog.sim.runtime_sim"),
        ("raftlog.runtime.planted", "raftlog.sim", "raftlog.sim"),
        ("api.planted", "tests.ports", "tests"),  # outside the graph: reported as its package
    ],
)
def test_production_importing_a_simulator_or_test_helper_is_caught(
    tree: Path, importer: str, imported: str, reported: str
) -> None:
    plant(tree, importer, f"import {imported}")
    assert_broken(tree, "no-simulator-in-production", f"{importer} -> {reported}")


@pytest.mark.parametrize("importer", ["cmq.node.queue_node", "cmq.planted", "api.planted"])
def test_the_server_importing_the_archive_is_caught(tree: Path, importer: str) -> None:
    plant(tree, "cmq.archive.job", "import pyspark")
    plant(tree, importer, "from cmq.archive import job")
    assert_broken(tree, "archive-outside-server", "cmq.archive.job")


@pytest.mark.parametrize(
    "imported", ["cmq.fsm.machine", "cmq.node.queue_node", "raftlog.errors", "api.app"]
)
def test_the_archive_reaching_past_the_http_api_is_caught(tree: Path, imported: str) -> None:
    plant(tree, "cmq.archive.job", f"import {imported}")
    assert_broken(tree, "archive-http-client", f"cmq.archive.job -> {imported}")


@pytest.mark.parametrize("imported", ["cmq.fsm.export", "cmq.admin.backup_admin", "raftlog.errors"])
def test_backup_reaching_past_the_http_api_is_caught(tree: Path, imported: str) -> None:
    plant(tree, "cmq.backup.load", f"import {imported}")
    assert_broken(tree, "backup-http-client", f"cmq.backup.load -> {imported}")


@pytest.mark.parametrize("imported", ["cmq.fsm.machine", "cmq.node.queue_node", "raftlog.errors"])
def test_api_reaching_past_the_service_is_caught(tree: Path, imported: str) -> None:
    plant(tree, "api.planted", f"import {imported}")
    assert_broken(tree, "api-service-surface", f"api.planted -> {imported}")


@pytest.mark.parametrize("module", ["raftlog.sim.network", "raftlog.sim.simulation"])
def test_the_core_simulator_doing_io_is_caught(tree: Path, module: str) -> None:
    plant(tree, module, "import time")
    assert_broken(tree, "sim-pure", f"{module} -> time")


@pytest.mark.parametrize("imported", ["cmq.node.queue_node", "cmq.routing.ops", "api.app"])
def test_the_redrive_reaching_past_the_service_is_caught(tree: Path, imported: str) -> None:
    plant(tree, "cmq.redrive", f"import {imported}")
    assert_broken(tree, "redrive-over-service", f"cmq.redrive -> {imported}")


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("cmq.fsm.machine", "import time"),
        ("cmq.fsm.queue", "from time import monotonic"),
        ("cmq.fsm.commands.codec", "import random"),
        ("cmq.fsm.planted", "import datetime"),  # a new module is covered without a list
        ("cmq.fsm.writer", "import os.path"),
    ],
)
def test_the_queue_machine_reading_a_clock_or_doing_io_is_caught(
    tree: Path, module: str, source: str
) -> None:
    plant(tree, module, source)
    assert_broken(tree, "fsm-pure", module)


def test_only_the_file_store_does_file_io(tree: Path) -> None:
    plant(tree, "cmq.fsm.segments", "import os\nimport shutil")
    assert_kept(tree, "fsm-pure")
    plant(tree, "cmq.fsm.segments", "import time")
    assert_broken(tree, "fsm-pure", "cmq.fsm.segments -> time")


Plants = tuple[tuple[str, str], ...]

BROKEN: list[Any] = [
    # (what is planted: (module, source) pairs, the contract, a text its report must hold)
    pytest.param(
        (("api.planted", "import cmq.routing.router\nimport cmq.catalog.meta"),),
        "api-service-surface",
        "api.planted -> cmq.routing.router",
        id="api-reaching-routing-or-the-catalog",
    ),
    pytest.param(
        (("raftlog.storage.planted", "from cmq.model import QueueAttributes"),),
        "raftlog-standalone",
        "raftlog.storage.planted -> cmq.model",
        id="raftlog-importing-the-queue",
    ),
    pytest.param(
        (("raftlog.runtime.planted", "import api.app"),),
        "raftlog-standalone",
        "raftlog.runtime.planted -> api.app",
        id="raftlog-importing-the-http-api",
    ),
    pytest.param(
        (
            ("raftlog.core.planted", "import raftlog.errors"),
            ("raftlog.errors", "from raftlog.storage.wal import Wal"),
        ),
        "core-pure",
        "raftlog.errors -> raftlog.storage.wal",
        id="core-reaching-storage-indirectly",
    ),
    pytest.param(
        (("cmq.planted", "from api.app import make_app"),),
        "queue-below-http",
        "cmq.planted -> api.app",
        id="the-queue-importing-the-http-api",
    ),
    pytest.param(
        (("cmq.fsm.planted", "import pyspark.sql"),),
        "archive-outside-server",
        "cmq.fsm.planted -> pyspark",
        id="the-server-importing-spark",
    ),
    pytest.param(
        (("cmq.service", "import cmq.fsm.machine"),),
        "api-service-surface",
        "cmq.service -> cmq.fsm.machine",
        id="api-reaching-past-the-service-indirectly",
    ),
    pytest.param(
        (("api.sqs.queues", "import aiohttp"),),
        "sqs-pure",
        "api.sqs.queues -> aiohttp",
        id="the-sqs-protocol-importing-aiohttp",
    ),
    pytest.param(
        (("api.sqs.protocol", "import api.models"),),
        "sqs-pure",
        "api.sqs.protocol -> api.models",
        id="the-sqs-surface-using-the-native-models",
    ),
    pytest.param(
        (("api.sqs.http", "from cmq.routing.router import Router"),),
        "sqs-via-service",
        "api.sqs.http -> cmq.routing.router",
        id="the-sqs-surface-reaching-past-the-service",
    ),
    pytest.param(
        (("api.routes", "import api.sqs.protocol"),),
        "native-api-without-sqs",
        "api.routes -> api.sqs.protocol",
        id="the-native-api-importing-the-sqs-surface",
    ),
    pytest.param(
        (("api.auth.sigv4", "import cmq.model"),),
        "auth-pure",
        "api.auth.sigv4 -> cmq.model",
        id="authentication-reaching-the-queue",
    ),
    pytest.param(
        (("cmq.fsm.reads", "import cmq.model"), ("cmq.model", "from cmq.routing import ops")),
        "fsm-pure",
        "cmq.model -> cmq.routing.ops",
        id="the-queue-machine-reaching-the-node-indirectly",
    ),
    pytest.param(
        (("cmq.fsm.machine", "from cmq.fsm.segments import FileSegmentStore"),),
        "fsm-pure",
        "cmq.fsm.machine -> cmq.fsm.segments",
        id="the-queue-machine-reaching-the-file-store",
    ),
]


@pytest.mark.parametrize(("plants", "contract", "expected"), BROKEN)
def test_a_planted_import_breaks_its_contract(
    tree: Path, plants: Plants, contract: str, expected: str
) -> None:
    for module, source in plants:
        plant(tree, module, source)
    assert_broken(tree, contract, expected)


KEPT: list[Any] = [
    # (what is planted, the contract that still holds): the declared exceptions
    pytest.param(
        (
            (
                "cmq.node.planted",
                "from raftlog.runtime import Clock\nfrom raftlog.transport import Address",
            ),
        ),
        "raftlog-face",
        id="the-queue-using-raftlogs-face",
    ),
    pytest.param(
        (
            (
                "raftlog.core.planted",
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import random",
            ),
        ),
        "core-pure",
        id="core-may-name-random-for-type-checking-only",
    ),
    pytest.param(
        (
            ("cmq.cli.server", "import api\nfrom api.app import make_app"),
            ("cmq.planted", "import cmq.cli.server"),
        ),
        "queue-below-http",
        id="the-serving-entry-point",
    ),
    pytest.param(
        (("cmq.archive.job", "import pyspark\nfrom cmq.fsm import segments"),),
        "archive-outside-server",
        id="the-archive-may-use-spark-and-the-queue",
    ),
    pytest.param(
        (("raftlog.sim.runtime_sim", "import asyncio"),),
        "sim-pure",
        id="the-runtime-simulator-may-use-asyncio",
    ),
]


@pytest.mark.parametrize(("plants", "contract"), KEPT)
def test_a_declared_exception_keeps_its_contract(tree: Path, plants: Plants, contract: str) -> None:
    for module, source in plants:
        plant(tree, module, source)
    assert_kept(tree, contract)
