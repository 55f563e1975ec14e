"""The corpus of broken goals repositories in ``broken/``.

Each case edits a copy of repo-template (``edit``: exact text replacements, each of
which must match once; ``delete``; ``add``) and lists the exact problems expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

CASES_DIR = Path(__file__).parent / "broken"


def case_names() -> list[str]:
    return sorted(p.stem for p in CASES_DIR.glob("*.yaml"))


def load_case(name: str) -> dict[str, Any]:
    return YAML(typ="safe").load((CASES_DIR / f"{name}.yaml").read_text())


def apply_case(case: dict[str, Any], files: dict[str, bytes]) -> dict[str, bytes]:
    """The template files with the case's edits applied."""
    result = dict(files)
    for path, edits in (case.get("edit") or {}).items():
        text = result[path].decode()
        for old, new in edits:
            count = text.count(old)
            assert count == 1, f"{path}: the edit target occurs {count} times: {old!r}"
            text = text.replace(old, new)
        result[path] = text.encode()
    for path in case.get("delete") or []:
        del result[path]
    for path, content in (case.get("add") or {}).items():
        result[path] = (content or "").encode()
    return result
