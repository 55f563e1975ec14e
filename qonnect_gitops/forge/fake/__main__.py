"""``python -m qonnect_gitops.forge.fake CONFIG``: run the fake forge until SIGTERM.

CONFIG is JSON: ``{"repositories": {"owner/name": "/path/to/bare.git"}, "tokenFile": path,
"hooks": [{"url", "secretFile", "dialect"}], "host": "127.0.0.1", "port": 0,
"urlFile": path}``. The URL it serves is written to ``urlFile`` once it listens.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

from qonnect_gitops.forge.fake.server import FakeForge, FakeForgeConfig, HookTarget
from qonnect_gitops.logs import configure


def main(argv: list[str]) -> int:
    configure()
    config = json.loads(Path(argv[1]).read_text())
    token = Path(config["tokenFile"]).read_text().strip()
    hooks = tuple(HookTarget(h["url"], Path(h["secretFile"]).read_text().strip(), h.get("dialect", "github"))
                  for h in config.get("hooks", ()))
    forge = FakeForge(FakeForgeConfig(
        repositories={name: Path(path) for name, path in config["repositories"].items()},
        tokens=(token,), hooks=hooks, host=config.get("host", "127.0.0.1"), port=int(config.get("port", 0))))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    forge.start()
    if config.get("urlFile"):
        Path(config["urlFile"]).write_text(forge.url)
    stop.wait()
    forge.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
