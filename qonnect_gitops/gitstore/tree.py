"""Reading and writing trees straight in the object database (no work tree, no index)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Union

import pygit2

from qonnect_gitops.gitstore.errors import InvalidPath, RevisionNotFound

RepoLike = Union[pygit2.Repository, str, Path]

#: The id of the empty tree; identical in every SHA-1 repository.
EMPTY_TREE_HEX = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

_BLOB_MODES = (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE)


def open_repo(repo: RepoLike) -> pygit2.Repository:
    """Accept an open repository or a path to one."""
    if isinstance(repo, pygit2.Repository):
        return repo
    return pygit2.Repository(str(repo))


def resolve_commit(repo: RepoLike, rev: str) -> pygit2.Commit:
    """Resolve a branch name, full ref name or (abbreviated) commit id to a commit."""
    r = open_repo(repo)
    candidates = [rev, f"refs/heads/{rev}", f"refs/remotes/origin/heads/{rev}"]
    for name in candidates:
        try:
            obj = r.revparse_single(name)
            return obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
            continue
    raise RevisionNotFound(f"{rev!r} is not a commit in {r.path}")


def split_path(path: str) -> list[str]:
    """Split a repo-relative POSIX path, refusing anything that could escape or alias."""
    if not path or path.startswith("/") or "\\" in path or "\0" in path:
        raise InvalidPath(f"not a relative POSIX path: {path!r}")
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", "..") or part.lower() == ".git":
            raise InvalidPath(f"bad component {part!r} in path {path!r}")
    return parts


def build_tree(repo: pygit2.Repository, files: Mapping[str, bytes]) -> pygit2.Oid:
    """Write blobs and trees for ``files`` (path -> bytes) and return the root tree id.

    The tree id depends only on the set of (path, bytes) pairs: Git sorts tree entries
    itself, so dict order never matters. An empty mapping gives the empty tree.
    """
    root: dict[str, object] = {}
    for path, data in files.items():
        parts = split_path(path)
        node = root
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidPath(f"{path!r} needs {part!r} to be a directory, but it is a file")
            node = child
        if parts[-1] in node:
            raise InvalidPath(f"{path!r} is both a file and a directory")
        node[parts[-1]] = bytes(data)
    return _write_node(repo, root)


def _write_node(repo: pygit2.Repository, node: Mapping[str, object]) -> pygit2.Oid:
    builder = repo.TreeBuilder()
    for name, child in node.items():
        if isinstance(child, dict):
            builder.insert(name, _write_node(repo, child), pygit2.enums.FileMode.TREE)
        else:
            assert isinstance(child, bytes)
            builder.insert(name, repo.create_blob(child), pygit2.enums.FileMode.BLOB)
    return builder.write()


def subtree_id(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> pygit2.Oid | None:
    """The id of the tree at ``path`` under ``tree``, or None when absent or not a tree."""
    if not path:
        return tree.id
    try:
        entry = tree[path]
    except KeyError:
        return None
    if entry.filemode != pygit2.enums.FileMode.TREE:
        return None
    return entry.id


def read_tree_files(repo: RepoLike, rev: str, prefix: str = "") -> dict[str, bytes]:
    """Every regular file under ``prefix`` at commit ``rev``, as repo-relative path -> bytes.

    Reads the object database only (works on bare mirrors). Symlinks and submodule
    entries are skipped: goals are plain files. A missing ``prefix`` gives ``{}``.
    """
    r = open_repo(repo)
    commit = resolve_commit(r, rev)
    prefix = prefix.strip("/")
    if prefix:
        split_path(prefix)
    start = subtree_id(r, commit.tree, prefix)
    if start is None:
        return {}
    out: dict[str, bytes] = {}
    _collect(r, r[start], prefix, out)
    return out


def _collect(repo: pygit2.Repository, tree: pygit2.Tree, base: str, out: dict[str, bytes]) -> None:
    for entry in tree:
        path = f"{base}/{entry.name}" if base else entry.name
        if entry.filemode == pygit2.enums.FileMode.TREE:
            _collect(repo, repo[entry.id], path, out)
        elif entry.filemode in _BLOB_MODES:
            out[path] = repo[entry.id].data
