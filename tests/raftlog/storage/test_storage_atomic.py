"""atomic_write: whatever happens, the path holds the old or the new content, never a mix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from raftlog.storage import atomic_write

OLD, NEW = b"old" * 1000, b"new!" * 5000


def test_creates_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    atomic_write(str(path), OLD)
    assert path.read_bytes() == OLD
    atomic_write(str(path), NEW)
    assert path.read_bytes() == NEW
    atomic_write(str(path), b"")
    assert path.read_bytes() == b""
    assert os.listdir(tmp_path) == ["f.bin"]


def _fail_nth(real: Callable[..., object], n: int) -> Callable[..., object]:
    calls = [0]

    def wrapper(*args: object) -> object:
        calls[0] += 1
        if calls[0] == n:
            raise OSError(5, "injected failure")
        return real(*args)

    return wrapper


@pytest.mark.parametrize(
    ("func", "nth"),
    [("write", 1), ("fsync", 1), ("replace", 1), ("close", 1)],
)
def test_failure_at_any_step_keeps_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, func: str, nth: int
) -> None:
    path = tmp_path / "f.bin"
    atomic_write(str(path), OLD)
    monkeypatch.setattr(os, func, _fail_nth(getattr(os, func), nth))
    with pytest.raises(OSError, match="injected"):
        atomic_write(str(path), NEW)
    monkeypatch.undo()
    assert path.read_bytes() == OLD
    assert os.listdir(tmp_path) == ["f.bin"]  # the temporary is cleaned up


def test_killed_writer_leaves_old_or_new(tmp_path: Path) -> None:
    """SIGKILL a process that rewrites the file in a loop: every observation is whole."""
    path = tmp_path / "f.bin"
    atomic_write(str(path), OLD)
    script = (
        "import sys\n"
        "from raftlog.storage import atomic_write\n"
        "old, new = b'old' * 1000, b'new!' * 5000\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
        "i = 0\n"
        "while True:\n"
        "    atomic_write(sys.argv[1], new if i % 2 == 0 else old)\n"
        "    i += 1\n"
    )
    seen = set()
    for delay in (0.0, 0.003, 0.007, 0.011, 0.02, 0.03):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(path)],
            stdout=subprocess.PIPE,
            cwd=str(Path(__file__).resolve().parents[3]),
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        content = path.read_bytes()
        assert content in (OLD, NEW)
        seen.add(content)
    assert seen  # at least one observation; usually both contents show up
