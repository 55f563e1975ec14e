"""Reading a goals tree from a directory into the mapping the loader takes.

The Git store offers the same mapping for a tree at a commit, so validation works the
same on a checkout and on a repository revision.
"""

from __future__ import annotations

import os
from pathlib import Path


def read_directory(root: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file below ``root`` as ``{posix relative path: bytes}``, hidden entries skipped."""
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath, name)
            files[path.relative_to(base).as_posix()] = path.read_bytes()
    return files
