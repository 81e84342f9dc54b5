"""The Helm chart, rendered by the real helm: lint, the shapes it renders at 3 and 5 replicas
and with every optional part on, strict validation against the Kubernetes schemas
(kubernetes-validate), and the values schema refusing what it must."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cmq.cli import launch
from tests.deploy.chart import ALL_ON, CHART, MONITORING_APIS, helm, one, render
from tests.deploy.pods import expand

K8S_VERSION = "1.31"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def test_lint_strict() -> None:
    for sets in (
        [],
        ["--set", "replicaCount=5"],
        ["--set", "cluster.scaling=static"],
        ["--set", "cluster.scaling=static", "--set", "replicaCount=5"],
        *[["--set", f"{k}={v}"] for k, v in ALL_ON.items()],
    ):
        out = helm("lint", "--strict", str(CHART), *sets, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "0 chart(s) failed" in out.stdout


def _validate(docs: list[dict[str, Any]]) -> set[str]:
    kinds = set()
    for d in docs:
        kinds.add(d["kind"])
        if d["kind"] in CRD_KINDS:
            assert d["apiVersion"] == "monitoring.coreos.com/v1"
            assert d["spec"], d
            continue
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    return kinds


def _host(i: int) -> str:
    return f"q-cmq-{i}.q-cmq-headless.default.svc.cluster.local"


@pytest.mark.parametrize("scaling", ["join", "static"])
@pytest.mark.parametrize("replicas", [3, 5])
def test_renders_valid_manifests_at_3_and_5_replicas(replicas: int, scaling: str) -> None:
    docs = render({"replicaCount": str(replicas), "cluster.scaling": scaling})
    kinds = _validate(docs)
    assert kinds == {
        "Secret",
        "ServiceAccount",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
        "Pod",  # the helm test hook
        *(["Job"] if scaling == "join" else []),  # the scale-down hook
    }
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == replicas
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    script = sts["spec"]["template"]["spec"]["containers"][0]["args"][0]
    peers = re.search(r'--peers "([^"]+)"', script)
    assert peers is not None
    founders = 3 if scaling == "join" else replicas
    expected = ",".join(f"{i + 1}={_host(i)}:{launch.DEFAULT_PEER_PORT}" for i in range(founders))
    assert peers.group(1) == expected
    joins = re.search(r'--join "([^"]+)"', script)
    assert joins is not None
    assert joins.group(1) == ",".join(
        f"http://{_host(i)}:{launch.DEFAULT_HTTP_PORT}" for i in range(founders)
    )
    headless = one(docs, "Service", "-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_join_scaling_changes_no_running_pod() -> None:
    """Scaling up or down with scaling=join changes only the StatefulSet's replica count: the
    pod template (founders, join URLs, addresses) is the same, so no running pod restarts."""
    at3, at5 = (one(render({"replicaCount": str(n)}), "StatefulSet") for n in (3, 5))
    assert at3["spec"]["template"] == at5["spec"]["template"]
    static3, static5 = (
        one(render({"replicaCount": str(n), "cluster.scaling": "static"}), "StatefulSet")
        for n in (3, 5)
    )
    assert static3["spec"]["template"] != static5["spec"]["template"]


def test_scale_down_hook_drains_the_nodes_above_the_new_count() -> None:
    job = one(render({"replicaCount": "3"}), "Job", "-scaledown")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CMQ_KEEP_NODES"] == "3"
    # its requests are signed with the credential derived from the cluster secret
    secret = next(e for e in c["env"] if e["name"] == "CMQ_SECRET")
    assert secret["valueFrom"]["secretKeyRef"]["name"] == "q-cmq-secret"
    assert env["CMQ_URL"] == f"http://q-cmq.default.svc.cluster.local:{launch.DEFAULT_HTTP_PORT}"
    assert c["command"] == ["python", "-c"]
    compile(c["args"][0], "scaledown", "exec")  # the script is valid Python
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert job["spec"]["activeDeadlineSeconds"] > int(env["CMQ_DRAIN_TIMEOUT"])
    off = render({"cluster.drainOnScaleDown": "false"}) + render({"cluster.scaling": "static"})
    assert not [d for d in off if d["kind"] == "Job"]


def test_optional_parts_render_only_where_their_api_exists() -> None:
    without = _validate(render(ALL_ON))
    assert without.isdisjoint(CRD_KINDS), "no monitoring API: no ServiceMonitor/PrometheusRule"
    docs = render(ALL_ON, api_versions=MONITORING_APIS)
    kinds = _validate(docs)
    assert {"ServiceMonitor", "PrometheusRule", "CronJob", "ConfigMap"} <= kinds
    # Scraped once per pod: through the headless Service only (it lists not-ready pods too).
    monitor = one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    scraped = [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Service" and monitor.items() <= d["metadata"]["labels"].items()
    ]
    assert scraped == ["q-cmq-headless"]
    rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {
        "CmqGroupWithoutLeader",
        "CmqReplicationLag",
        "CmqDiskFilling",
        "CmqSlowFsync",
        "CmqDiskFailed",
        "CmqDiskFull",
        "CmqReplicaNeedsRepair",
        "CmqStorageDamageFound",
        "CmqClockUnsafe",
        "CmqQueueGrowing",
        "CmqQueueOldestMessage",
        "CmqQueueNoConsumers",
        "CmqDeadLetters",
    }  # each is unit-tested on synthetic series in test_alert_rules.py
    cron = one(docs, "CronJob")
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["cmq"]
    assert container["args"][:5] == [
        "archive",
        "--url",
        f"http://q-cmq.default.svc.cluster.local:{launch.DEFAULT_HTTP_PORT}",
        "--out",
        "/var/lib/cmq-archive",
    ]


def test_the_archive_cronjob_runs_the_archive_image_in_local_mode_or_on_a_spark_cluster() -> None:
    def archive(sets: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
        cron = one(render({"archive.enabled": "true", **sets}), "CronJob")
        (c,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        return c, {e["name"]: e for e in c.get("env", [])}

    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    # Local mode by default: Spark inside the pod; signed with the cluster secret's credential.
    c, env = archive({})
    assert c["image"] == f"cmq-archive:{app_version}", "the Dockerfile's archive target"
    assert "--master" not in c["args"]
    assert env["CMQ_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "q-cmq-secret"
    assert not {"POD_IP", "SPARK_LOCAL_IP"} & set(env)
    # On a Spark cluster: the driver stays in the pod and advertises the pod's IP.
    sets = {
        "archive.sparkMaster": "spark://spark-master:7077",
        "archive.image.repository": "registry.example/cmq-archive",
        "archive.image.tag": "1.2.3",
        "archive.extraArgs": "{--max-segments=500}",
    }
    c, env = archive(sets)
    assert c["image"] == "registry.example/cmq-archive:1.2.3"
    assert c["args"][5:] == ["--master", "spark://spark-master:7077", "--max-segments=500"]
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    values = {"POD_IP": "10.1.2.3"}
    for name in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME"):
        assert expand(env[name]["value"], values) == "10.1.2.3"
    # A cluster serving unsigned requests needs no credential.
    _, env = archive({"auth.anonymous": "true"})
    assert "CMQ_SECRET" not in env


def test_pod_spec_is_restricted_probed_and_spread() -> None:
    sts = one(render(), "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert c["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    env = {e["name"]: e for e in c["env"]}
    assert env["CMQ_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "q-cmq-secret"
    zone = env["CMQ_ZONE"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert zone == "metadata.labels['topology.kubernetes.io/zone']"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": launch.DEFAULT_HTTP_PORT, "peer": launch.DEFAULT_PEER_PORT}


def _serve_argv(sts: dict[str, Any], pod: str, tmp_path: Path) -> list[str]:
    """The arguments the container's script passes to ``cmq`` in pod ``pod``: the script run
    by /bin/sh (after Kubernetes' ``$(VAR)`` expansion) with a stand-in ``cmq`` that prints
    them, one per line."""
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "cmq"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "POD_NAME": pod}
    argv = [expand(a, env) for a in c["command"] + c["args"]]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=10)
    return out.stdout.splitlines()


def test_node_id_from_the_ordinal_and_rejoin_for_listed_ordinals(tmp_path: Path) -> None:
    sts = one(render({"cluster.rejoinOrdinals": "{2}"}), "StatefulSet")
    for ordinal in range(3):
        words = _serve_argv(sts, f"q-cmq-{ordinal}", tmp_path)
        assert words[0] == "serve"
        assert words[words.index("--node-id") + 1] == str(ordinal + 1)
        assert ("--rejoin" in words) == (ordinal == 2), words
    plain = one(render(), "StatefulSet")
    assert "--rejoin" not in _serve_argv(plain, "q-cmq-2", tmp_path)


@pytest.mark.parametrize("scaling", ["join", "static"])
def test_founders_found_and_the_other_pods_join(scaling: str, tmp_path: Path) -> None:
    sts = one(render({"replicaCount": "5", "cluster.scaling": scaling}), "StatefulSet")
    for ordinal in range(5):
        words = _serve_argv(sts, f"q-cmq-{ordinal}", tmp_path)
        # The address the other nodes dial (and the catalog records): the stable DNS name.
        assert words[words.index("--peer") + 1] == f"{_host(ordinal)}:{launch.DEFAULT_PEER_PORT}"
        founder = scaling == "static" or ordinal < 3
        assert ("--peers" in words) == founder, words
        assert ("--join" in words) == (not founder), words
        if not founder:
            assert words[words.index("--join") + 1].split(",")[0] == (
                f"http://{_host(0)}:{launch.DEFAULT_HTTP_PORT}"
            )


def test_the_per_queue_metrics_settings_reach_cmq_serve(tmp_path: Path) -> None:
    sts = one(
        render({"metrics.queues": "orders-*\\,billing", "metrics.topQueues": "50"}), "StatefulSet"
    )
    words = _serve_argv(sts, "q-cmq-0", tmp_path)
    assert words[words.index("--metrics-queues") + 1] == "orders-*,billing"
    assert words[words.index("--metrics-top-queues") + 1] == "50"
    default = _serve_argv(one(render(), "StatefulSet"), "q-cmq-0", tmp_path)
    assert default[default.index("--metrics-queues") + 1] == "*"
    assert default[default.index("--metrics-top-queues") + 1] == "1000"


def test_log_format_and_tracing_reach_the_node_environment() -> None:
    def env(sets: dict[str, str]) -> dict[str, str]:
        c = one(render(sets), "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in c["env"]}

    default = env({})
    assert default["CMQ_LOG_FORMAT"] == "text" and "CMQ_OTLP_ENDPOINT" not in default
    on = env({"cluster.logFormat": "json", "tracing.otlpEndpoint": "http://otel:4318"})
    assert on["CMQ_LOG_FORMAT"] == "json"
    assert on["CMQ_OTLP_ENDPOINT"] == "http://otel:4318"


def test_one_claim_and_data_dir_per_disk(tmp_path: Path) -> None:
    sts = one(
        render(
            {
                "persistence.disks[0].name": "wal",
                "persistence.disks[0].size": "5Gi",
                "persistence.disks[1].name": "bulk",
                "persistence.disks[1].size": "100Gi",
            }
        ),
        "StatefulSet",
    )
    claims = {t["metadata"]["name"]: t for t in sts["spec"]["volumeClaimTemplates"]}
    assert set(claims) == {"wal", "bulk"}
    assert claims["bulk"]["spec"]["resources"]["requests"]["storage"] == "100Gi"
    words = _serve_argv(sts, "q-cmq-0", tmp_path)
    dirs = [words[i + 1] for i, w in enumerate(words) if w == "--data-dir"]
    assert dirs == ["/var/lib/cmq/wal/node", "/var/lib/cmq/bulk/node"]
    mounts = {
        m["name"]: m["mountPath"]
        for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    assert mounts["wal"] == "/var/lib/cmq/wal" and mounts["bulk"] == "/var/lib/cmq/bulk"


def test_existing_secret_is_used_and_none_is_created() -> None:
    docs = render({"secret.existingSecret": "mine"})
    assert not [d for d in docs if d["kind"] == "Secret"]
    c = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    ref = next(e for e in c["env"] if e["name"] == "CMQ_SECRET")["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "mine"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"replicaCount": "4"}, "replicaCount"),
        ({"replicaCount": "2"}, "replicaCount"),
        ({"persistence.disks[0].size": "ten"}, "size"),
        ({"secret.value": "short"}, "value"),
        ({"secret.create": "false"}, "existingSecret"),
        ({"podDisruptionBudget.maxUnavailable": "2"}, "maxUnavailable"),
        ({"cluster.groups": "0"}, "groups"),
        ({"image.repository": ""}, "repository"),
        ({"cluster.scaling": "elastic"}, "scaling"),
        ({"cluster.founders": "5"}, "founders"),
        ({"cluster.founders": "2"}, "founders"),
        ({"cluster.replication": "5"}, "replication"),
        ({"cluster.replication": "4"}, "replication"),
        ({"cluster.rejoinOrdinals": "{-1}"}, "rejoinOrdinals"),
        ({"metrics.topQueues": "-1"}, "topQueues"),
        ({"metrics.queues": "a$(id)"}, "queues"),
        ({"cluster.logFormat": "yaml"}, "logFormat"),
        ({"tracing.otlpEndpoint": "otel:4318"}, "otlpEndpoint"),
        ({"archive.sparkMaster": "spark master"}, "sparkMaster"),
        ({"archive.image.repository": ""}, "repository"),
    ],
)
def test_bad_values_are_refused(sets: dict[str, str], message: str) -> None:
    args = ["template", "q", str(CHART)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    out = helm(*args, check=False)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def _upgrade_render(
    tmp_path: Path, running: dict[str, Any], sets: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of a copy of the chart in which ``lookup`` of the release's
    StatefulSet answers ``running`` (what a cluster would answer on ``helm upgrade``)."""
    chart = tmp_path / "cmq"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        (chart / "values.schema.json").unlink()
        call = 'lookup "apps/v1" "StatefulSet" .Release.Namespace (include "cmq.fullname" .)'
        for name in ("statefulset.yaml", "scaledown-hook.yaml"):
            path = chart / "templates" / name
            text = path.read_text()
            assert call in text, name
            path.write_text(text.replace(call, ".Values.runningStatefulSet"))
    (tmp_path / "running.yaml").write_text(yaml.safe_dump({"runningStatefulSet": running}))
    args = ["template", "q", str(chart), "-f", str(tmp_path / "running.yaml")]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    return helm(*args, check=False)


def test_upgrade_guards_against_the_running_statefulset(tmp_path: Path) -> None:
    def running(replicas: int, founders: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"labels": {"app": "cmq"}}
        if founders is not None:
            meta["annotations"] = {"cmq/founders": founders}
        return {"spec": {"replicas": replicas, "template": {"metadata": meta}}}

    def kinds(out: subprocess.CompletedProcess[str]) -> list[str]:
        assert out.returncode == 0, out.stderr
        return [d["kind"] for d in yaml.safe_load_all(out.stdout) if d]

    joined5 = running(5, "3")
    # Down: the scale-down hook; up or unchanged: none.
    assert "Job" in kinds(_upgrade_render(tmp_path, joined5, {"replicaCount": "3"}))
    assert "Job" not in kinds(_upgrade_render(tmp_path, joined5, {"replicaCount": "7"}))
    assert "Job" not in kinds(_upgrade_render(tmp_path, joined5, {"replicaCount": "5"}))
    # The founders are fixed; a release from before join scaling had every pod as a founder.
    out = _upgrade_render(tmp_path, joined5, {"replicaCount": "5", "cluster.founders": "5"})
    assert out.returncode != 0 and "founded by 3 pods" in out.stderr, out.stderr
    legacy5 = running(5, None)
    out = _upgrade_render(tmp_path, legacy5, {"replicaCount": "5"})
    assert out.returncode != 0 and "set cluster.founders=5" in out.stderr, out.stderr
    assert "StatefulSet" in kinds(
        _upgrade_render(tmp_path, legacy5, {"replicaCount": "7", "cluster.founders": "5"})
    )
    # static: replicaCount cannot change.
    out = _upgrade_render(tmp_path, legacy5, {"replicaCount": "3", "cluster.scaling": "static"})
    assert out.returncode != 0 and "cannot change to 3" in out.stderr, out.stderr


def test_peer_tls_is_on_by_default_from_a_secret_and_can_be_turned_off(tmp_path: Path) -> None:
    pod = one(render(), "StatefulSet")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    mount = next(m for m in c["volumeMounts"] if m["name"] == "peer-tls")
    assert mount["readOnly"] is True
    for var, name in (("CERT", "tls.crt"), ("KEY", "tls.key"), ("CA", "ca.crt")):
        assert env[f"CMQ_PEER_TLS_{var}"] == f"{mount['mountPath']}/{name}"
    volume = next(v for v in pod["volumes"] if v["name"] == "peer-tls")
    assert volume["secret"]["secretName"] == "q-cmq-peer-tls"
    named = one(render({"peerTls.secretName": "mine"}), "StatefulSet")["spec"]["template"]
    assert any(v.get("secret", {}).get("secretName") == "mine" for v in named["spec"]["volumes"])
    off = one(render({"peerTls.enabled": "false"}), "StatefulSet")["spec"]["template"]["spec"]
    (c,) = off["containers"]
    assert not [e for e in c["env"] if e["name"].startswith("CMQ_PEER_TLS")]
    assert "peer-tls" not in {v["name"] for v in off["volumes"]}
    assert "peer-tls" not in {m["name"] for m in c["volumeMounts"]}
