"""Reading a goals tree from a directory into the mapping the loader takes.

The Git store offers the same mapping for a tree at a commit, so validation works the
same on a checkout and on a repository revision. To keep the two the same, a directory
is read the way Git would store it: only regular files; a symlink is never followed
(Git stores the link, not what it points to) and, like Git trees read by qonnect, not
read at all; FIFOs, devices and sockets are skipped. Each skipped entry is reported as
a warning. Reading is bounded: at most ``MAX_FILE_BYTES + 1`` bytes of a file (the
loader refuses the file) and one file past the tree's ``TreeLimits`` (files or bytes in
all; the loader refuses the tree).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from qonnect_gitops.model.errors import Problem
from qonnect_gitops.model.limits import DEFAULT_TREE_LIMITS, MAX_FILE_BYTES, TreeLimits

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


@dataclass
class DirectoryTree:
    """The files of a directory and what was skipped (warnings: ``Problem`` without a line)."""

    files: dict[str, bytes] = field(default_factory=dict)
    skipped: list[Problem] = field(default_factory=list)


def scan_directory(root: str | os.PathLike[str], limits: TreeLimits = DEFAULT_TREE_LIMITS) -> DirectoryTree:
    """Every regular file below ``root`` as ``{posix relative path: bytes}``, hidden entries
    skipped, with a warning for every symlink and special file left out. Reading stops
    just past ``limits`` (the loader refuses such a tree)."""
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    tree = DirectoryTree()
    total = 0
    for dirpath, dirnames, filenames in os.walk(base):  # never descends into symlinked dirs
        for name in sorted(dirnames):
            if not name.startswith(".") and Path(dirpath, name).is_symlink():
                tree.skipped.append(_skipped(base, Path(dirpath, name), "a symlink to a directory"))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not Path(dirpath, d).is_symlink())
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath, name)
            data, why = _read_regular(path)
            if data is None:
                tree.skipped.append(_skipped(base, path, why))
                continue
            tree.files[path.relative_to(base).as_posix()] = data
            total += len(data)
            if len(tree.files) > limits.files or total > limits.bytes:
                return tree  # the loader refuses a tree over the limits; reading on costs memory only
    return tree


def read_directory(root: str | os.PathLike[str], limits: TreeLimits = DEFAULT_TREE_LIMITS) -> dict[str, bytes]:
    """The files of ``scan_directory`` (warnings dropped)."""
    return scan_directory(root, limits).files


def _read_regular(path: Path) -> tuple[bytes | None, str]:
    """At most ``MAX_FILE_BYTES + 1`` bytes of a regular file; None and why for anything else."""
    try:
        info = path.lstat()
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return None, "a symlink (Git stores the link, not its target; it is not followed)"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file (FIFO, device or socket)"
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced since the lstat
            return None, "not a regular file (FIFO, device or socket)"
        return fh.read(MAX_FILE_BYTES + 1), ""


def _skipped(base: Path, path: Path, why: str) -> Problem:
    return Problem(path.relative_to(base).as_posix(), None, None, "", f"skipped: {why}")
