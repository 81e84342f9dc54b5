"""Rendering the Helm chart (helm/cmq) with the real helm binary, for the chart tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.helmbin import ensure_helm

CHART = Path(__file__).resolve().parents[2] / "helm" / "cmq"
MONITORING_APIS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
ALL_ON = {
    "metrics.serviceMonitor.enabled": "true",
    "metrics.prometheusRule.enabled": "true",
    "metrics.grafanaDashboard.enabled": "true",
    "archive.enabled": "true",
}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ensure_helm()), *args], capture_output=True, text=True, check=check, timeout=120
    )


def render(
    sets: dict[str, str] | None = None,
    *,
    release: str = "q",
    namespace: str = "default",
    api_versions: tuple[str, ...] = (),
    show_tests: bool = True,
) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``sets`` (``--set k=v``); every document, parsed."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for k, v in (sets or {}).items():
        args += ["--set", f"{k}={v}"]
    for api in api_versions:
        args += ["--api-versions", api]
    if not show_tests:
        args.append("--skip-tests")
    out = helm(*args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (kind, name_suffix, [d["metadata"]["name"] for d in found])
    return found[0]
