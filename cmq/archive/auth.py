"""The archive's requests to the cluster, signed as every cmq client signs them (AWS SigV4,
`cmq.client.signing`).

The key is `AccessKey.resolve`'s, read once per process: ``CMQ_ACCESS_KEY_ID`` and
``CMQ_SECRET_ACCESS_KEY``, else the key file ``CMQ_KEY_FILE``; with neither, requests go
unsigned (only a node run with ``--anonymous`` serves them). ``CMQ_CA_FILE`` names the CAs an
``https`` URL is verified with. ``cmq archive`` also accepts ``CMQ_SECRET`` (the cluster secret:
it signs with the credential derived from it, as the chart's hooks and archive CronJob do).

Spark's executors read the records streams, so they need the key too: on a local master they
inherit the driver's environment; on a cluster the driver hands the resolved key to them as
``spark.executorEnv.*`` (`executor_conf`), which Spark redacts (``*SECRET*``) in its UI and logs.
"""

from __future__ import annotations

import functools
import http.client
import urllib.request

from cmq.client.signing import AccessKey, ssl_context

KEY_ID_ENV, SECRET_ENV, REGION_ENV = "CMQ_ACCESS_KEY_ID", "CMQ_SECRET_ACCESS_KEY", "CMQ_REGION"


@functools.cache
def access_key() -> AccessKey | None:
    """This process's key (see the module docstring); None: unsigned."""
    return AccessKey.resolve()


def open_url(
    url: str,
    timeout: float,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> http.client.HTTPResponse:
    """``urllib.request.urlopen`` of ``url``, signed with `access_key` when there is one (a
    JSON ``body`` when given; ``headers`` added unsigned, e.g. ``Accept``). Raises as
    ``urlopen`` does (``HTTPError`` on a 4xx or 5xx)."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    if body is not None:
        req.add_header("Content-Type", "application/json")
    key = access_key()
    if key is not None:
        for name, value in key.sign(method, url, body).items():
            req.add_header(name, value)
    resp: http.client.HTTPResponse = urllib.request.urlopen(
        req, timeout=timeout, context=ssl_context()
    )
    return resp


def executor_conf() -> dict[str, str]:
    """Spark settings that give the executors this process's key (empty when unsigned)."""
    key = access_key()
    if key is None:
        return {}
    env = {KEY_ID_ENV: key.access_key_id, SECRET_ENV: key.secret_access_key, REGION_ENV: key.region}
    return {f"spark.executorEnv.{k}": v for k, v in env.items()}
