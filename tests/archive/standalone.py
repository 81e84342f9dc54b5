"""A Spark standalone cluster on loopback for the archive tests: one master and N workers
started from the pyspark installation's own ``bin/spark-class`` (no Spark download, no
``sbin`` daemon scripts), each worker in a process group of its own so that killing it takes
its executor and that executor's Python workers with it, as losing the machine would.

Everything it writes (logs, work directories, local dirs, a conf directory) is under ``root``.
Its ``spark-defaults.conf`` fixes the port of a driver's UI, so the test can ask a running
application (``cmq archive``'s driver) which executor runs tasks right now (`running_tasks`).
The workers run this checkout's ``cmq`` (``PYTHONPATH``) with the interpreter of the test run,
as a cluster whose machines have the package installed would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmq.cli.launch import free_ports

ROOT = Path(__file__).resolve().parents[2]
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pyspark installation (it carries ``bin/spark-class``, ``bin/spark-submit`` and
    ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(root: Path) -> dict[str, str]:
    """The environment of every Spark process of the test (the master, the workers, and the
    drivers: ``cmq archive`` and ``spark-submit``): loopback only, its own directories, and no
    ``CMQ_*`` variable of the test's (a driver is given its credentials explicitly; executors
    get theirs from it)."""
    conf = root / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("CMQ_")},
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }


@dataclass
class Standalone:
    """``start()`` the master and ``workers`` workers (``cores`` and ``memory`` each), wait
    until every worker registered; `kill_worker` SIGKILLs a worker's whole process group;
    `stop` ends what is left (SIGTERM, then SIGKILL)."""

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    port: int = 0
    ui_port: int = 0
    driver_ui_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - owned by the process
        self.procs[name] = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=spark_env(self.root),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: executors and Python workers
        )

    def start(self, timeout: float = 120) -> None:
        self.port, self.ui_port, self.driver_ui_port = free_ports(3)
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        defaults = f"spark.ui.port {self.driver_ui_port}\nspark.port.maxRetries 0\n"
        (self.root / "conf" / "spark-defaults.conf").write_text(defaults)
        ports = ["--port", str(self.port), "--webui-port", str(self.ui_port)]
        self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1", *ports])
        for i in range(1, self.workers + 1):
            self.start_worker(i)
        self.wait_workers(self.workers, timeout)

    def start_worker(self, i: int) -> None:
        """Start worker ``i`` (also again after `kill_worker`, as a new worker)."""
        work = self.root / f"work-{i}"
        work.mkdir(parents=True, exist_ok=True)
        (ui_port,) = free_ports(1)
        size = ["--cores", str(self.cores), "--memory", self.memory]
        dirs = ["--webui-port", str(ui_port), "--work-dir", str(work)]
        self._spawn(f"worker-{i}", [WORKER_CLASS, "--host", "127.0.0.1", *size, *dirs, self.url])

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as r:
            got: dict[str, Any] = json.load(r)
            return got

    def wait_workers(self, n: int, timeout: float = 120) -> None:
        """Until ``n`` workers are alive at the master."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.state()
                if last.get("aliveworkers", 0) >= n:
                    return
            except (OSError, ValueError) as e:  # not up yet; an empty answer while starting
                last = e
            for name, p in self.procs.items():
                if p.poll() is not None and name != "master" and not name.startswith("dead-"):
                    raise AssertionError(f"{name} exited: {self.log(name)[-3000:]}")
            time.sleep(0.5)
        raise AssertionError(f"{n} Spark workers not alive after {timeout} s: {last}")

    def running_tasks(self) -> dict[str, int]:
        """Executor id -> tasks it runs now, as the running application's driver counts them
        (its REST API); empty when no application runs."""
        base = f"http://127.0.0.1:{self.driver_ui_port}/api/v1/applications"
        try:
            with urllib.request.urlopen(base, timeout=5) as r:
                apps = json.load(r)
            out: dict[str, int] = {}
            for app in apps:
                with urllib.request.urlopen(f"{base}/{app['id']}/executors", timeout=5) as r:
                    for e in json.load(r):
                        if e["id"] != "driver" and e.get("isActive", True):
                            out[str(e["id"])] = int(e["activeTasks"])
            return out
        except (OSError, ValueError, KeyError):
            return {}

    def tasks_left(self) -> int:
        """Tasks of the running application's active stages not yet complete (running or
        pending), as its driver counts them; 0 when no application or stage runs."""
        base = f"http://127.0.0.1:{self.driver_ui_port}/api/v1/applications"
        try:
            with urllib.request.urlopen(base, timeout=5) as r:
                apps = json.load(r)
            left = 0
            for app in apps:
                url = f"{base}/{app['id']}/stages?status=active"
                with urllib.request.urlopen(url, timeout=5) as r:
                    for st in json.load(r):
                        left += int(st["numTasks"]) - int(st["numCompleteTasks"])
            return left
        except (OSError, ValueError, KeyError):
            return 0

    def _group(self, i: int) -> list[tuple[int, list[bytes]]]:
        """(pid, argv) of every process in worker ``i``'s process group."""
        pgid = self.procs[f"worker-{i}"].pid
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if os.getpgid(int(d.name)) != pgid:
                    continue
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except (OSError, ProcessLookupError):
                continue
            out.append((int(d.name), argv))
        return out

    def executors(self, i: int) -> set[str]:
        """Ids of the executors worker ``i`` runs (their JVMs' ``--executor-id``)."""
        ids = set()
        for _, argv in self._group(i):
            if b"--executor-id" in argv:
                ids.add(argv[argv.index(b"--executor-id") + 1].decode())
        return ids

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i``, its executor and their Python workers (the process group)."""
        p = self.procs.pop(f"worker-{i}")
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        self.procs[f"dead-worker-{i}"] = p

    def log(self, name: str) -> str:
        try:
            return (self.root / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        live = [p for p in self.procs.values() if p.poll() is None]
        for p in live:
            os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in live:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
