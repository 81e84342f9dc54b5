#!/usr/bin/env bash
# Run the Locust load test against a throwaway local cluster; the exit code is Locust's (non-zero
# when an SLO failed, see slo.py). Used by `make loadtest`; extra arguments go to Locust.
#
#   BIN                 directory of the venv's executables (cmq, locust, python) [.venv/bin]
#   LOADTEST_OUT        reports: <out>/cmq_*.csv, report.html, slo.json, cluster logs [loadtest/out]
#   LOADTEST_SECONDS    run length [60]; LOADTEST_SHAPE steps|soak|none [steps]
#   LOADTEST_TIMEOUT    hard limit on Locust's run [LOADTEST_SECONDS + 120]
#   LOADTEST_HTTP_PORT  first HTTP port of the cluster [a free range, peers at +1000]
#   LOADTEST_KEEP_DATA  1 keeps the cluster's temporary data directory
# Everything else (LOADTEST_*, SLO_*) is read by locustfile.py.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin="${BIN:-.venv/bin}"
out="${LOADTEST_OUT:-loadtest/out}"
export LOADTEST_SECONDS="${LOADTEST_SECONDS:-60}"
export LOADTEST_SHAPE="${LOADTEST_SHAPE:-steps}"
limit="${LOADTEST_TIMEOUT:-$(( ${LOADTEST_SECONDS%.*} + 120 ))}"
mkdir -p "$out"
rm -f "$out"/cmq_*.csv "$out/report.html" "$out/slo.json"

# A range of 3 HTTP ports and 3 peer ports (HTTP + 1000) that are free right now.
http_port="${LOADTEST_HTTP_PORT:-$("$bin/python" - <<'PY'
import random, socket
for _ in range(200):
    base = random.randrange(20000, 40000)
    ports = [base + i for i in range(3)] + [base + 1000 + i for i in range(3)]
    try:
        socks = []
        for p in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    break
else:
    raise SystemExit("no free port range found")
PY
)}"
peer_port=$(( http_port + 1000 ))
urls="http://127.0.0.1:${http_port},http://127.0.0.1:$(( http_port + 1 )),http://127.0.0.1:$(( http_port + 2 ))"

data="$(mktemp -d "${TMPDIR:-/tmp}/cmq-loadtest.XXXXXX")"
cluster_pid=""
stop_cluster() {
    if [[ -n "$cluster_pid" ]] && kill -0 "$cluster_pid" 2>/dev/null; then
        kill -TERM "$cluster_pid" 2>/dev/null || true  # cmq dev stops its nodes on SIGTERM
        wait "$cluster_pid" 2>/dev/null || true
    fi
    cp "$data"/node*.log "$out"/ 2>/dev/null || true
    if [[ "${LOADTEST_KEEP_DATA:-0}" == 1 ]]; then
        echo "cluster data kept in $data"
    else
        rm -rf "$data"
    fi
}
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The cluster runs in its own session so a Ctrl-C on the terminal reaches neither it nor Locust:
# this script stops Locust gracefully (SIGTERM, so the summary and SLO verdict still come out),
# then the cluster (the EXIT trap).
echo "starting cmq dev: 3 nodes on $urls, data in $data"
setsid "$bin/cmq" dev --nodes 3 --data-dir "$data" --http-port "$http_port" --peer-port "$peer_port" \
    >"$out/cluster.log" 2>&1 &
cluster_pid=$!

# Every node must answer /readyz (its groups have leaders) before the load starts.
if ! CMQ_URLS="$urls" PID="$cluster_pid" "$bin/python" - <<'PY'
import os, sys, time, urllib.request
urls, pid = os.environ["CMQ_URLS"].split(","), int(os.environ["PID"])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("cmq dev exited")
    ready = 0
    for u in urls:
        try:
            with urllib.request.urlopen(u + "/readyz", timeout=1) as r:
                ready += r.status == 200
        except OSError:
            pass
    if ready == len(urls):
        sys.exit(0)
    time.sleep(0.2)
sys.exit("the cluster was not ready within 60 s")
PY
then
    echo "cluster did not start; see $out/cluster.log and $out/node*.log" >&2
    exit 3
fi

echo "running Locust (${LOADTEST_SHAPE}, ${LOADTEST_SECONDS} s); reports in $out/"
# In the background, so SIGINT is ignored: a Ctrl-C reaches only this script, which sends Locust
# SIGTERM; the locustfile then ends the shape and the run finishes normally (summary, verdict).
# With LOADTEST_SHAPE=none and Locust's -t, raise LOADTEST_TIMEOUT to above -t.
CMQ_URLS="$urls" LOADTEST_SLO_REPORT="${LOADTEST_SLO_REPORT:-$out/slo.json}" \
    timeout --kill-after=30 "$limit" \
    "$bin/locust" -f loadtest/locustfile.py --headless --only-summary \
    --csv "$out/cmq" --html "$out/report.html" "$@" </dev/null &
locust_pid=$!
interrupted=0
stopped=0
trap 'interrupted=1; stopped=1; echo "stopping Locust"; kill -TERM "$locust_pid" 2>/dev/null || true' \
    INT TERM
while :; do
    interrupted=0
    rc=0
    wait "$locust_pid" || rc=$?
    # A trap cuts `wait` short (status 128 + signal): wait again for Locust's own status.
    if (( interrupted && rc > 128 )); then continue; fi
    break
done
echo "locust exit code: $rc"
if (( stopped && rc == 0 )); then
    echo "the run was cut short: exit code 130"
    rc=130
fi
exit "$rc"
