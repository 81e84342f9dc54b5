"""The README's Python client example, run as it is written against the session's cluster
(only its node URLs and queue name swapped)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cmq.cluster import CmqCluster, unique_queue

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[3] / "README.md"


def example(nth: int = 0) -> str:
    """The ``nth`` Python block of the README's Python client section."""
    text = README.read_text()
    section = text[text.index("### Python client") :]
    section = section[: section.index("\n### ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) > nth, "missing python block in the README's Python client section"
    return str(blocks[nth])


def test_the_readme_example_works(cmq_cluster: CmqCluster) -> None:
    code = example()
    urls = re.search(r'Client\("([^"]+)"\)', code)
    assert urls is not None and code.count('"orders"') == 4
    queue = unique_queue("orders")
    code = code.replace(urls.group(1), ",".join(cmq_cluster.urls[:2]))
    code = code.replace('"orders"', f'"{queue}"')
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["1 order 1", "2 order 2"]


def test_the_readme_stream_example_works(cmq_cluster: CmqCluster) -> None:
    code = example(1)
    assert code.count('"http://127.0.0.1:8080"') == 2 and code.count('"events"') == 3
    code = code.replace('"http://127.0.0.1:8080"', f'"{cmq_cluster.urls[0]}"')
    code = code.replace('"events"', f'"{unique_queue("events")}"')
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["received 1000"]
