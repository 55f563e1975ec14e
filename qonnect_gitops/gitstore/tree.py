"""Reading and writing trees straight in the object database (no work tree, no index)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pygit2

from qonnect_gitops.gitstore.errors import InvalidPath, RevisionNotFound
from qonnect_gitops.gitstore.objects import (
    BLOB,
    MODE_BLOB,
    MODE_TREE,
    TREE,
    ObjectBatch,
    object_id,
    serialize_tree,
)

RepoLike = pygit2.Repository | str | Path

#: The id of the empty tree; identical in every SHA-1 repository.
EMPTY_TREE_HEX = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

_BLOB_MODES = (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE)
# Tree entries give their mode as a plain int; comparing with these skips building an
# enum member per entry (a tree of 10,000 clusters is walked on every decision).
_TREE_MODE = int(pygit2.enums.FileMode.TREE)
_BLOB_MODE = int(pygit2.enums.FileMode.BLOB)


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
        if part in ("", ".", "..") or (len(part) == 4 and part.lower() == ".git"):
            raise InvalidPath(f"bad component {part!r} in path {path!r}")
    return parts


def build_tree(
    repo: pygit2.Repository,
    files: Mapping[str, bytes],
    *,
    base: pygit2.Oid | None = None,
    batch: ObjectBatch | None = None,
    trees: dict[str, pygit2.Oid] | None = None,
) -> pygit2.Oid:
    """Write blobs and trees for ``files`` (path -> bytes) and return the root tree id.

    The tree id depends only on the set of (path, bytes) pairs: entries are put in
    git's canonical order, so dict order never matters. An empty mapping gives the
    empty tree. ``base`` (usually the current plan tree) lets unchanged blobs and
    subtrees be recognised by hash alone, so a cycle that changes one file costs one
    blob and the trees above it. With ``batch`` the objects are queued there and the
    caller flushes; otherwise they are written before returning. ``trees``, when
    given, receives the id of every directory by path (``""`` is the root), except
    below a second-level directory recalled whole (see ``tree_id_of``).
    """
    root = _nest(files)
    own = batch is None
    batch = ObjectBatch(repo) if batch is None else batch
    base_tree = repo[base] if base is not None else None
    tree_id = _write_node(repo, batch, root, base_tree if isinstance(base_tree, pygit2.Tree) else None,
                          "", trees if trees is not None else {})
    if own:
        batch.flush()
    _DIRS.end_use()
    return tree_id


def tree_id_of(files: Mapping[str, bytes], path: str = "") -> pygit2.Oid | None:
    """The id ``build_tree`` would give the tree of ``files`` (or its directory at
    ``path``; None when there is none), computed in memory: nothing is written or read, so
    comparing a decision with a commit costs hashing, not blob reads.

    Second-level directories (a plan's ``clusters/<name>``) are remembered by their files
    from one call to the next, so hashing a decision that changed one cluster costs that
    cluster's files and one pass over the paths, not every blob and tree again."""
    node = _at(_nest(files), path)
    tree_id = None if node is None else pygit2.Oid(raw=_hash_node(node))
    _DIRS.end_use()
    return tree_id


def tree_ids_under(files: Mapping[str, bytes], path: str) -> dict[str, pygit2.Oid]:
    """The id of every directory directly under ``path`` (say ``clusters``: one per
    cluster), as ``tree_id_of`` computes them."""
    node = _at(_nest(files), path)
    out: dict[str, pygit2.Oid] = {}
    for name, child in (node or {}).items():
        if isinstance(child, _Known):
            out[name] = pygit2.Oid(raw=child.raw)
        elif isinstance(child, dict):
            out[name] = pygit2.Oid(raw=_hash_node(child))
    _DIRS.end_use()
    return out


def _at(root: dict[str, object], path: str) -> dict[str, object] | None:
    node: object = root
    for part in split_path(path) if path else []:
        if not isinstance(node, dict) or isinstance(node, _Known):
            return None
        node = node.get(part)
    if isinstance(node, _Known):
        known: dict[str, object] = {}
        for sub, data in node.files:
            _insert(known, sub, data)
        return _Fresh(known, node.files)
    return node if isinstance(node, dict) else None


class _Known:
    """A second-level directory whose files are exactly ones seen before: its tree id."""

    __slots__ = ("files", "raw")

    def __init__(self, raw: bytes, files: tuple[tuple[str, bytes], ...]) -> None:
        self.raw = raw
        self.files = files


class _DirectoryMemo:
    """Tree ids of second-level directories by their (relative path, bytes) pairs in the
    order given. Entries unused by the last few calls are dropped, so it holds about one
    plan's directories; the bytes are shared with whoever made them (the render caches)."""

    KEEP = 4

    def __init__(self) -> None:
        self._ids: dict[tuple[tuple[str, bytes], ...], tuple[int, bytes]] = {}
        self._use = 0

    def get(self, files: tuple[tuple[str, bytes], ...]) -> bytes | None:
        hit = self._ids.get(files)
        if hit is None:
            return None
        self._ids[files] = (self._use, hit[1])
        return hit[1]

    def put(self, files: tuple[tuple[str, bytes], ...], raw: bytes) -> None:
        self._ids[files] = (self._use, raw)

    def end_use(self) -> None:
        self._use += 1
        if len(self._ids) > 1024:
            oldest = self._use - self.KEEP
            self._ids = {k: v for k, v in self._ids.items() if v[0] >= oldest}


_DIRS = _DirectoryMemo()
_CHECKED: set[tuple[str, str]] = set()  # second-level directory names split_path accepted


def _nest(files: Mapping[str, bytes]) -> dict[str, object]:
    """``files`` as nested dicts (directories) of bytes (files), paths checked; a
    second-level directory seen before with the same files becomes a ``_Known``."""
    groups: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
    rest: list[tuple[str, bytes]] = []
    for path, data in files.items():
        parts = path.split("/", 2)
        if len(parts) == 3:
            groups.setdefault((parts[0], parts[1]), []).append((parts[2], bytes(data)))
        else:
            rest.append((path, data))
    root: dict[str, object] = {}
    for path, data in rest:
        _insert(root, path, data)
    for (top, name), members in groups.items():
        key = tuple(members)
        raw = _DIRS.get(key)
        if raw is None:
            for sub, data in members:
                _insert(root, f"{top}/{name}/{sub}", data)
            node = root[top]
            assert isinstance(node, dict)
            node[name] = _Fresh(node[name], key)
        else:
            if (top, name) not in _CHECKED:  # the rest was checked when it was first seen
                split_path(f"{top}/{name}")
                _CHECKED.add((top, name))
            child = root.setdefault(top, {})
            if not isinstance(child, dict):
                raise InvalidPath(f"{top}/{name} needs {top!r} to be a directory, but it is a file")
            if name in child:
                raise InvalidPath(f"{top}/{name!r} is both a file and a directory")
            child[name] = _Known(raw, key)
    return root


class _Fresh(dict):  # type: ignore[type-arg]
    """A second-level directory not seen before: remembered once its id is known."""

    def __init__(self, entries: dict[str, object], files: tuple[tuple[str, bytes], ...]) -> None:
        super().__init__(entries)
        self.files = files


def _insert(root: dict[str, object], path: str, data: bytes) -> None:
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


def _hash_node(node: Mapping[str, object]) -> bytes:
    entries: list[tuple[str, int, bytes]] = []
    for name, child in node.items():
        if isinstance(child, _Known):
            entries.append((name, MODE_TREE, child.raw))
        elif isinstance(child, dict):
            entries.append((name, MODE_TREE, _hash_node(child)))
        else:
            assert isinstance(child, bytes)
            entries.append((name, MODE_BLOB, object_id(BLOB, child)))
    raw = object_id(TREE, serialize_tree(entries))
    if isinstance(node, _Fresh):
        _DIRS.put(node.files, raw)
    return raw


def _write_node(
    repo: pygit2.Repository,
    batch: ObjectBatch,
    node: Mapping[str, object],
    base: pygit2.Tree | None,
    path: str,
    trees: dict[str, pygit2.Oid],
) -> pygit2.Oid:
    known = {e.name: e for e in base} if base is not None else {}
    entries: list[tuple[str, int, bytes]] = []
    for name, child in node.items():
        old = known.get(name)
        sub_path = f"{path}/{name}" if path else name
        if isinstance(child, _Known):
            same = old is not None and old.id.raw == child.raw and old.filemode == _TREE_MODE
            if not same and pygit2.Oid(raw=child.raw) not in repo:
                # Hashed before but never written here: write it out like a new directory.
                fresh: dict[str, object] = {}
                for sub, data in child.files:
                    _insert(fresh, sub, data)
                child = _Fresh(fresh, child.files)
            else:
                trees[sub_path] = pygit2.Oid(raw=child.raw)
                entries.append((name, MODE_TREE, child.raw))
                continue
        if isinstance(child, dict):
            old_tree = repo[old.id] if old is not None and old.filemode == _TREE_MODE else None
            written = _write_node(repo, batch, child, old_tree, sub_path, trees)  # type: ignore[arg-type]
            entries.append((name, MODE_TREE, written.raw))
        else:
            assert isinstance(child, bytes)
            raw = object_id(BLOB, child)
            if old is None or old.id.raw != raw or old.filemode != _BLOB_MODE:
                batch.add(BLOB, child)
            entries.append((name, MODE_BLOB, raw))
    data = serialize_tree(entries)
    raw = object_id(TREE, data)
    if isinstance(node, _Fresh):
        _DIRS.put(node.files, raw)
    if base is not None and base.id.raw == raw:
        trees[path] = base.id  # unchanged subtree: nothing to write, nothing to check
    else:
        trees[path] = batch.add(TREE, data)
    return trees[path]


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


def directories_under(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> dict[str, pygit2.Oid]:
    """Each directory directly under ``path`` of ``tree`` and its tree id, in one tree read."""
    sub = subtree_id(repo, tree, path)
    if sub is None:
        return {}
    return {e.name or "": e.id for e in _tree(repo, sub) if e.filemode == _TREE_MODE}


def read_tree_files(repo: RepoLike, rev: str, prefix: str = "", skipped: list[str] | None = None) -> dict[str, bytes]:
    """Every regular file under ``prefix`` at commit ``rev``, as repo-relative path -> bytes.

    Reads the object database only (works on bare mirrors). Symlinks and submodule
    entries are skipped (never followed): goals are plain files; their paths are appended
    to ``skipped`` when given. A missing ``prefix`` gives ``{}``.
    """
    r, start, prefix = _subtree_at(repo, rev, prefix)
    if start is None:
        return {}
    out: dict[str, bytes] = {}
    _collect(r, _tree(r, start), prefix, out, skipped)
    return out


def _subtree_at(repo: RepoLike, rev: str, prefix: str) -> tuple[pygit2.Repository, pygit2.Oid | None, str]:
    """The repository, the tree id at ``prefix`` of commit ``rev`` (None: absent) and the
    prefix as a checked path without slashes at either end."""
    r = open_repo(repo)
    commit = resolve_commit(r, rev)
    prefix = prefix.strip("/")
    if prefix:
        split_path(prefix)
    return r, subtree_id(r, commit.tree, prefix), prefix


def list_tree_paths(repo: RepoLike, rev: str, prefix: str = "") -> set[str]:
    """The paths of ``read_tree_files`` without reading any blob: tree objects only."""
    r, start, prefix = _subtree_at(repo, rev, prefix)
    out: set[str] = set()
    pending = [] if start is None else [(start, prefix)]
    while pending:
        oid, base = pending.pop()
        for entry in _tree(r, oid):
            path = f"{base}/{entry.name}" if base else entry.name or ""
            if entry.filemode == pygit2.enums.FileMode.TREE:
                pending.append((entry.id, path))
            elif entry.filemode in _BLOB_MODES:
                out.add(path)
    return out


def read_file(repo: RepoLike, rev: str, path: str) -> bytes | None:
    """One file at commit ``rev``, or None when the commit has no such regular file."""
    r = open_repo(repo)
    commit = resolve_commit(r, rev)
    try:
        entry = commit.tree[path.strip("/")]
    except KeyError:
        return None
    if entry.filemode not in _BLOB_MODES:
        return None
    blob = r[entry.id]
    return blob.data if isinstance(blob, pygit2.Blob) else None


def _collect(repo: pygit2.Repository, tree: pygit2.Tree, base: str, out: dict[str, bytes],
             skipped: list[str] | None = None) -> None:
    for entry in tree:
        name = entry.name or ""
        path = f"{base}/{name}" if base else name
        if entry.filemode == pygit2.enums.FileMode.TREE:
            _collect(repo, _tree(repo, entry.id), path, out, skipped)
        elif entry.filemode in _BLOB_MODES:
            blob = repo[entry.id]
            assert isinstance(blob, pygit2.Blob)
            out[path] = blob.data
        elif skipped is not None:
            skipped.append(path)


def _tree(repo: pygit2.Repository, oid: pygit2.Oid) -> pygit2.Tree:
    obj = repo[oid]
    if not isinstance(obj, pygit2.Tree):
        raise TypeError(f"{oid} is not a tree")
    return obj
