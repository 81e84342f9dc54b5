# cmq node image: `cmq serve` as a non-root user, data under /var/lib/cmq (a volume).
#   docker build -t cmq .
#   docker run -e CMQ_SECRET=... -v cmq1:/var/lib/cmq cmq serve --node-id 1 --peers 1=...
# Requests must be signed: on first start the node writes the cluster's bootstrap admin key to
# <data dir>/admin-key.json (mode 0600; `docker exec` to read it). `--anonymous` turns signing
# off (development only). HTTPS: `--tls-cert`/`--tls-key`. See docs/security.md.
# The Helm chart (helm/cmq) runs this image as a StatefulSet.
# The archive image (`cmq archive`: the archive extra, pyspark and pyarrow, and a Java runtime)
# is the target `archive`; the chart's archive CronJob runs it (archive.image):
#   docker build --target archive -t cmq-archive .

# -- build: a wheel of the project and its dependencies, no compilers left in the final image --
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY raftlog ./raftlog
COPY cmq ./cmq
COPY api ./api
# otel-export: the OpenTelemetry SDK and OTLP exporter, used only with --otlp-endpoint.
RUN python -m venv /opt/cmq && /opt/cmq/bin/pip install --quiet '.[otel-export]'

# -- build-archive: the same virtualenv with the archive extra (pyspark, pyarrow) ----------------
FROM build AS build-archive
RUN /opt/cmq/bin/pip install --quiet '.[otel-export,archive]'

# -- archive: `cmq archive` (the Spark job: its driver, or a Spark cluster's worker image) -------
# Spark 4 needs Java 17+: Debian's headless JRE. Built only with --target archive (the node image
# below stays the default target). Spark's scratch space is /tmp (a volume in the chart).
FROM python:3.11-slim-bookworm AS archive
LABEL org.opencontainers.image.title="cmq-archive" \
      org.opencontainers.image.description="The cmq archive job: released segments to Parquet with Spark" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN apt-get update \
 && apt-get install --yes --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 cmq \
 && useradd --system --uid 10001 --gid cmq --home-dir /tmp --shell /usr/sbin/nologin cmq
COPY --from=build-archive /opt/cmq /opt/cmq
# Spark's executors run the driver's interpreter (/opt/cmq/bin/python): a Spark cluster's
# workers run this image too.
ENV PATH=/opt/cmq/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["cmq"]
CMD ["archive", "--help"]

# -- run: the node image (the default target) -----------------------------------------------------
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="cmq" \
      org.opencontainers.image.description="A Raft-replicated, reliable message queue" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 cmq \
 && useradd --system --uid 10001 --gid cmq --home-dir /var/lib/cmq --shell /usr/sbin/nologin cmq \
 && mkdir -p /var/lib/cmq && chown cmq:cmq /var/lib/cmq
COPY --from=build /opt/cmq /opt/cmq
ENV PATH=/opt/cmq/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CMQ_HTTP=0.0.0.0:8080 \
    CMQ_PEER=0.0.0.0:9080 \
    CMQ_DATA_DIR=/var/lib/cmq/data
VOLUME ["/var/lib/cmq"]
# 8080: the HTTP API, /metrics and the /ui console; 9080: peer (Raft) traffic.
EXPOSE 8080 9080
USER 10001:10001
WORKDIR /var/lib/cmq
# cmq serve hands its groups' leadership to other nodes on SIGTERM, then closes cleanly.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["cmq"]
CMD ["serve"]
