"""The goals repository's post-receive hook: what a forge does on a push.

``python -m qonnect_gitops.demo.hook CONFIG`` reads git's ``<old> <new> <ref>`` lines
from stdin. A push to ``main`` is announced to the leads (``POST /v1/hooks/git``; the
first lead that accepts it is enough, as behind a load balancer); a push to
``cluster/<name>`` to that cluster's agent (``POST /webhook``). Both are signed like
GitHub's (``X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body>``). CONFIG is JSON:
``{"secret_file", "leads": [url...], "agents": {cluster: url}, "main": "main",
"cluster_prefix": "cluster/", "log": path, "forge": url, "forge_repository": name}``.
With ``forge``, every push is also announced to the fake forge (``POST /_fake/pushed``),
which then moves the heads of its pull requests, as a forge's own receive hook does.
Imports nothing of the project: it runs inside every push and must start fast.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def post(url: str, body: bytes, secret: bytes, timeout: float = 2.0) -> int:
    sig = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "X-Hub-Signature-256": sig, "X-GitHub-Event": "push"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def main(argv: list[str]) -> int:
    config: dict[str, Any] = json.loads(Path(argv[1]).read_text())
    secret = Path(config["secret_file"]).read_bytes().strip()
    main_ref = "refs/heads/" + config.get("main", "main")
    prefix = "refs/heads/" + config.get("cluster_prefix", "cluster/")
    lines: list[str] = []
    threads = []
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 3:
            continue
        old, new, ref = parts
        body = json.dumps({"ref": ref, "before": old, "after": new}).encode()
        if ref == main_ref:
            def to_leads(body: bytes = body, ref: str = ref) -> None:
                for url in config["leads"]:
                    code = post(url.rstrip("/") + "/v1/hooks/git", body, secret)
                    lines.append(f"{time.time():.3f} {ref} -> {url} {code}")
                    if 200 <= code < 300:
                        return
            threads.append(threading.Thread(target=to_leads))
        elif ref.startswith(prefix):
            url = config["agents"].get(ref[len(prefix):])
            if url:
                def to_agent(url: str = url, body: bytes = body, ref: str = ref) -> None:
                    code = post(url.rstrip("/") + "/webhook", body, secret)
                    lines.append(f"{time.time():.3f} {ref} -> {url} {code}")
                threads.append(threading.Thread(target=to_agent))
    if config.get("forge"):
        def to_forge() -> None:
            body = json.dumps({"repository": config.get("forge_repository", "")}).encode()
            req = urllib.request.Request(config["forge"].rstrip("/") + "/_fake/pushed", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=2) as resp:
                    lines.append(f"{time.time():.3f} pushed -> forge {resp.status}")
            except OSError as exc:
                lines.append(f"{time.time():.3f} pushed -> forge failed: {exc}")
        threads.append(threading.Thread(target=to_forge))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=5)
    if config.get("log") and lines:
        with open(config["log"], "a") as log:
            log.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
