"""Fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "repo-template"


@pytest.fixture(scope="session")
def template_files() -> dict[str, bytes]:
    """The files of repo-template as the loader takes them."""
    from qonnect_gitops.model import read_directory

    return read_directory(TEMPLATE)
