#!/bin/bash
# A/B of node settings given as environment variables (every `cmq serve` flag has a CMQ_*
# twin): for each VARIANT in $VARIANTS (e.g. "CMQ_COALESCE_SENDS=off CMQ_COALESCE_SENDS=on",
# listed in the order to run; alternate them), a fresh 3-node `cmq dev` with that variable set
# runs the shared harness's J1 and J2 over the stream and over HTTP, one line per job.
#
# usage: VARIANTS="A=1 A=2 A=1 A=2" [SECS=15] [PERF_HARNESS=../shared/bench] bench/ab_env.sh
set -u
cd "$(dirname "$0")/.."
HARNESS=${PERF_HARNESS:-../shared/bench}
PY=.venv/bin/python
URLS=http://127.0.0.1:18380,http://127.0.0.1:18381,http://127.0.0.1:18382
for variant in ${VARIANTS:?set VARIANTS}; do
  d=$(mktemp -d /tmp/cmq-ab-XXXX)
  env "$variant" setsid .venv/bin/cmq dev --nodes 3 --data-dir "$d/data" --http-port 18380 \
    --peer-port 19380 > "$d/log" 2>&1 &
  pid=$!
  for _ in $(seq 90); do curl -sf http://127.0.0.1:18380/readyz > /dev/null && break; sleep 1; done
  sleep 3
  for job in "J1-stream cmq-stream --produce-only" "J2-stream cmq-stream" \
             "J1-http cmq --produce-only" "J2-http cmq"; do
    set -- $job
    name=$1
    shift
    out=$($PY "$HARNESS/queue_bench.py" "$@" --seconds "${SECS:-15}" --url "$URLS" 2>&1 | tr '\n' ' ')
    echo "$variant $name $(echo "$out" | grep -oE '\brate=[0-9]+|consume_rate=[0-9]+|p99=[0-9.na]+|missing=-?[0-9]+|dups=[0-9]+' | tr '\n' ' ')"
  done
  kill -INT -- "-$pid"
  wait "$pid" 2> /dev/null
  rm -rf "$d"
done
