"""The agent imports only model, gitstore, logs and its own modules (ARCHITECTURE.md §5)."""

from __future__ import annotations

import ast
from pathlib import Path

import qonnect_gitops.agent as agent_pkg

ALLOWED = ("qonnect_gitops.agent", "qonnect_gitops.model", "qonnect_gitops.gitstore", "qonnect_gitops.logs")


def test_agent_imports_only_allowed_layers() -> None:
    bad = []
    for path in Path(agent_pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("qonnect_gitops") and not name.startswith(ALLOWED):
                    bad.append(f"{path.name}: {name}")
    assert bad == []
