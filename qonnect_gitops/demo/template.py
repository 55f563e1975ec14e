"""Where the goals template is.

Chosen: a source checkout or an editable install (``pip install -e .``) has
``repo-template/`` next to the ``qonnect_gitops`` package, and that is used. A built
wheel may ship a copy as package data under ``qonnect_gitops/data/repo-template``
(``pyproject.toml`` already includes ``data/**/*``); it is used when present. Nothing
copies it there at build time yet, so a plain wheel without it fails with a clear message.
"""

from __future__ import annotations

from pathlib import Path

import qonnect_gitops

PACKAGE = Path(qonnect_gitops.__file__).resolve().parent
CANDIDATES = (PACKAGE.parent / "repo-template", PACKAGE / "data" / "repo-template")


def find_template() -> Path:
    """The first candidate holding a ``qonnect.yaml``; FileNotFoundError naming both otherwise."""
    for path in CANDIDATES:
        if (path / "qonnect.yaml").is_file():
            return path
    raise FileNotFoundError("repo-template not found; looked in " + ", ".join(map(str, CANDIDATES)))
