"""A real Prometheus server for tests: scrapes the given sims every second (demo/prometheus.py)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.demo import prometheus
from qonnect_gitops.gitstore.daemon import free_port


def require() -> str:
    """The binary, or skip (.ci/run installs the Debian package)."""
    exe = prometheus.binary()
    if exe is None:  # pragma: no cover - CI installs it
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return exe


@contextmanager
def running(tmp: Path, targets: Mapping[str, str], port: int | None = None) -> Iterator[str]:
    """A server scraping ``targets`` (name -> sim Prometheus URL); yields its base URL once ready."""
    exe = require()
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "prometheus.yml").write_text(prometheus.config(targets, interval=1.0))
    listen = f"127.0.0.1:{port or free_port()}"
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(prometheus.command(exe, tmp / "prometheus.yml", tmp / "data", listen),
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{listen}"
    try:
        deadline = time.monotonic() + 60
        while not ready(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()
        log.close()


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def instant(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=5) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def scrapes(url: str, cluster: str) -> int:
    """How many samples of ``up`` the server holds for ``cluster`` in the last minute (one per scrape)."""
    found = instant(url, f'count_over_time(up{{cluster="{cluster}"}}[1m])')
    return int(float(found[0]["value"][1])) if found else 0
