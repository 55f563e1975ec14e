"""A real Prometheus scraping the simulated clusters (the Debian package ``prometheus``).

One server for the whole fleet: each cluster's sim serves ``/metrics`` on its Prometheus
port, scraped every ``interval`` seconds, and the agents query this server with PromQL
instead of the sims' own query subset. ``binary()`` says whether one is installed; the
demo falls back to the sims' subset without it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import yaml


def binary() -> str | None:
    """The ``prometheus`` on PATH, or None."""
    return shutil.which("prometheus")


def config(targets: Mapping[str, str], interval: float = 1.0) -> str:
    """A configuration scraping each cluster's sim (name -> its Prometheus base URL); the
    ``cluster`` label names where a series was scraped."""
    seconds = f"{max(1, round(interval))}s"
    return yaml.safe_dump({
        "global": {"scrape_interval": seconds, "scrape_timeout": seconds, "evaluation_interval": seconds},
        "scrape_configs": [{
            "job_name": "qonnect-sim", "honor_labels": True, "metrics_path": "/metrics",
            "static_configs": [{"targets": [urlsplit(url).netloc], "labels": {"cluster": name}}
                               for name, url in sorted(targets.items())],
        }],
    }, sort_keys=False)


def command(exe: str, config_file: Path, data_dir: Path, listen: str) -> list[str]:
    """The command line of a server keeping an hour of data in ``data_dir``, on ``listen`` (host:port)."""
    return [exe, f"--config.file={config_file}", f"--storage.tsdb.path={data_dir}",
            "--storage.tsdb.retention.time=1h", f"--web.listen-address={listen}", "--log.level=warn"]
