"""Reading and writing trees straight in the object database (no work tree, no index)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import pygit2

from qonnect_gitops.gitstore.errors import InvalidPath, RevisionNotFound
from qonnect_gitops.gitstore.objects import (
    BLOB,
    MODE_BLOB,
    MODE_TREE,
    TREE,
    ObjectBatch,
    object_id,
    parse_tree,
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


@runtime_checkable
class GroupedFiles(Protocol):
    """Files (``{path: bytes}``) that also hold the directories under one top-level
    directory grouped, as a plan's rendering holds its clusters (``render.PlanFiles``).

    Given such a mapping, the tree functions here take each directory whole: one whose
    files are the same as in an earlier call reuses its tree id at the cost of comparing
    its (path, bytes) pairs, with no walk over its paths, so writing or hashing a decision
    costs the clusters that changed and one step per cluster. The same mapping given again
    costs neither (it is recalled by identity): it must never change once made."""

    grouped_under: str
    """The top-level directory whose directories ``directories`` holds (``clusters``)."""

    def directories(self) -> Mapping[str, tuple[tuple[str, bytes], ...]]:
        """Each directory under ``grouped_under`` and its files: (path inside it, bytes)
        pairs in path order."""

    def loose(self) -> Mapping[str, bytes]:
        """Every file outside those directories, by its full path."""


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
    second-level directories recalled whole and what is below them (see ``tree_id_of``):
    every second-level directory is an entry of its parent, which ``tree_entries``
    reads without a lookup, written yet or not.

    ``files`` grouped by directory (``GroupedFiles``) costs, for each directory whose
    files are the ones of an earlier call, a comparison of its pairs and no walk.
    """
    root = _nest(files)
    own = batch is None
    batch = ObjectBatch(repo) if batch is None else batch
    base_raw = base.raw if base is not None and _is_tree(repo, base) else None
    tree_id = _write_node(repo, batch, root, base_raw, "", trees if trees is not None else {})
    if own:
        batch.flush()
    _DIRS.end_use()
    return tree_id


def tree_entries(repo: pygit2.Repository, tree_id: pygit2.Oid,
                 batch: ObjectBatch | None = None) -> Mapping[str, tuple[int, bytes]]:
    """A tree's entries as name -> (mode, raw id). Large trees and the top two levels of
    every tree ``build_tree`` built are remembered by id for this repository (a tree never
    changes), so reading a plan's ``clusters`` tree, one entry per cluster, costs a lookup.
    A tree still queued in ``batch`` is read from there: what this answers never depends
    on what the memo still holds. Do not modify the result."""
    return _entry_memo(repo).get(repo, tree_id.raw, batch)


def _is_tree(repo: pygit2.Repository, oid: pygit2.Oid) -> bool:
    """Whether ``oid`` is a tree of ``repo``; KeyError when ``repo`` has no such object."""
    if oid.raw in _entry_memo(repo).by_id and oid in repo:
        return True
    return isinstance(repo[oid], pygit2.Tree)


class _EntryMemo:
    """Entries of one repository's recently built or read trees (``tree_entries``), the
    last few dozen. One per repository: a process that writes several (a test run, a lead
    beside a benchmark) must not have one repository's trees push another's out, or have a
    tree believed known in a repository that never held it."""

    LARGE = 256  # a read tree with fewer entries is read again when needed: cheap enough
    KEEP = 32

    def __init__(self) -> None:
        self.by_id: dict[bytes, dict[str, tuple[int, bytes]]] = {}

    def get(self, repo: pygit2.Repository, raw: bytes,
            batch: ObjectBatch | None = None) -> dict[str, tuple[int, bytes]]:
        found = self.by_id.get(raw)
        if found is not None:
            self.by_id[raw] = self.by_id.pop(raw)  # most recently used last
            return found
        queued = batch.queued(raw) if batch is not None else None
        if queued is not None:
            entries = parse_tree(queued)
        else:
            entries = {e.name or "": (int(e.filemode), e.id.raw) for e in _tree(repo, pygit2.Oid(raw=raw))}
        if len(entries) >= self.LARGE:
            self.put(raw, entries)
        return entries

    def put(self, raw: bytes, entries: dict[str, tuple[int, bytes]]) -> None:
        # Popped first: assigning an existing key keeps its old place, and the oldest go.
        self.by_id.pop(raw, None)
        self.by_id[raw] = entries
        while len(self.by_id) > self.KEEP:
            del self.by_id[next(iter(self.by_id))]


_REPO_MEMOS: dict[str, _EntryMemo] = {}
_REPO_MEMOS_KEEP = 4  # repositories whose tree memos are kept, most recently used last


def _entry_memo(repo: pygit2.Repository) -> _EntryMemo:
    """The tree entry memo of ``repo`` (by its git directory)."""
    key = repo.path
    memo = _REPO_MEMOS.pop(key, None)
    if memo is None:
        memo = _EntryMemo()
        while len(_REPO_MEMOS) >= _REPO_MEMOS_KEEP:
            del _REPO_MEMOS[next(iter(_REPO_MEMOS))]
    _REPO_MEMOS[key] = memo
    return memo


def tree_id_of(files: Mapping[str, bytes], path: str = "") -> pygit2.Oid | None:
    """The id ``build_tree`` would give the tree of ``files`` (or its directory at
    ``path``; None when there is none), computed in memory: nothing is written or read, so
    comparing a decision with a commit costs hashing, not blob reads.

    Second-level directories (a plan's ``clusters/<name>``) are remembered by their files
    from one call to the next, so hashing a decision that changed one cluster costs that
    cluster's files and one pass over the paths (one step per directory when the files
    come grouped, ``GroupedFiles``), not every blob and tree again."""
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
        elif isinstance(child, _Dir):
            out[name] = pygit2.Oid(raw=_hash_node(child))
    _DIRS.end_use()
    return out


def _at(root: _Dir, path: str) -> _Dir | None:
    node: object = root
    for part in split_path(path) if path else []:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if isinstance(node, _Known):
        known = _Dir()
        for sub, data in node.files:
            _insert(known, sub, data)
        return _Fresh(known, node.files)
    return node if isinstance(node, _Dir) else None


class _Known:
    """A second-level directory whose files are exactly ones seen before: its tree id."""

    __slots__ = ("files", "raw")

    def __init__(self, raw: bytes, files: tuple[tuple[str, bytes], ...]) -> None:
        self.raw = raw
        self.files = files


class _DirectoryMemo:
    """Tree ids of second-level directories by their (relative path, bytes) pairs in the
    order given. Entries unused by the last few calls are dropped, so it holds about one
    plan's directories; the bytes are shared with whoever made them (the render caches).
    Shared by every repository of the process (it maps content to ids, true anywhere): a
    write takes an id found here as written only when base's entry or ``oid in repo`` says
    this repository holds it (``_write_child``)."""

    KEEP = 4

    def __init__(self) -> None:
        self._ids: dict[tuple[tuple[str, bytes], ...], tuple[int, bytes]] = {}
        self._use = 0
        self._used = False
        self._limit = 1024

    def get(self, files: tuple[tuple[str, bytes], ...]) -> bytes | None:
        self._used = True
        hit = self._ids.get(files)
        if hit is None:
            return None
        self._ids[files] = (self._use, hit[1])
        return hit[1]

    def put(self, files: tuple[tuple[str, bytes], ...], raw: bytes) -> None:
        self._ids[files] = (self._use, raw)

    def end_use(self) -> None:
        """One call is over; a call that asked nothing (a mapping recalled whole) does not
        count. Pruned when it doubled since the last pruning, so a plan of 10,000 clusters
        is not gone over on every call."""
        if not self._used:
            return
        self._used = False
        self._use += 1
        if len(self._ids) > self._limit:
            oldest = self._use - self.KEEP
            self._ids = {k: v for k, v in self._ids.items() if v[0] >= oldest}
            self._limit = max(1024, 2 * len(self._ids))


class _NestMemo:
    """The nested form of the last grouped mappings, by identity: the leader hashes a
    decision's rendering (is it the plan in force?), takes its cluster trees' ids (prune
    limits) and writes it, and only the first of these needs to look at each cluster.
    A ``GroupedFiles`` does not change once made, so its identity names its content.
    Shared by every repository of the process: a recalled directory's id stands for
    written objects only where it equals base's entry, which this repository holds."""

    KEEP = 2

    def __init__(self) -> None:
        self._last: list[tuple[GroupedFiles, _Dir]] = []

    def get(self, files: GroupedFiles) -> _Dir | None:
        return next((root for seen, root in self._last if seen is files), None)

    def put(self, files: GroupedFiles, root: _Dir) -> None:
        self._last = [(files, root), *self._last[: self.KEEP - 1]]


_DIRS = _DirectoryMemo()
_NESTED = _NestMemo()
_CHECKED: set[tuple[str, str]] = set()  # second-level directory names split_path accepted


def _nest(files: Mapping[str, bytes]) -> _Dir:
    """``files`` as nested dicts (directories) of bytes (files), paths checked; a
    second-level directory seen before with the same files becomes a ``_Known``. A
    grouped mapping seen in the last calls gives the same nested form again, with what
    hashing and writing it found out."""
    if isinstance(files, GroupedFiles):
        recalled = _NESTED.get(files)
        if recalled is not None:
            return recalled
    groups: dict[tuple[str, str], list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...]] = {}
    rest: list[tuple[str, bytes]] = []
    loose = files
    if isinstance(files, GroupedFiles):
        top = files.grouped_under
        split_path(top)
        groups = {(top, name): members for name, members in files.directories().items()}
        loose = files.loose()
    for path, data in loose.items():
        parts = path.split("/", 2)
        if len(parts) == 3:
            found = groups.setdefault((parts[0], parts[1]), [])
            if isinstance(found, tuple):  # a loose file in a grouped directory (not expected)
                found = groups[(parts[0], parts[1])] = list(found)
            found.append((parts[2], bytes(data)))
        else:
            rest.append((path, data))
    root = _Dir()
    for path, data in rest:
        _insert(root, path, data)
    for (top, name), members in groups.items():
        if not members:
            continue  # no files, no directory
        key = members if isinstance(members, tuple) else tuple(members)
        raw = _DIRS.get(key)
        if raw is None:
            for sub, data in key:
                _insert(root, f"{top}/{name}/{sub}", data)
            node = root[top]
            assert isinstance(node, dict)
            node[name] = _Fresh(node[name], key)
        else:
            if (top, name) not in _CHECKED:  # the rest was checked when it was first seen
                split_path(f"{top}/{name}")
                _CHECKED.add((top, name))
            child = root.get(top)
            if child is None:
                child = root[top] = _Dir()
            if not isinstance(child, dict):
                raise InvalidPath(f"{top}/{name} needs {top!r} to be a directory, but it is a file")
            if name in child:
                raise InvalidPath(f"{top}/{name!r} is both a file and a directory")
            child[name] = _Known(raw, key)
    if isinstance(files, GroupedFiles):
        _NESTED.put(files, root)
    return root


class _Dir(dict):  # type: ignore[type-arg]
    """A directory: name -> bytes (a file), ``_Dir`` or ``_Known``. ``hashed`` holds its
    tree id, its tree object's content and, for a large or top-level one, its entries as
    ``tree_entries`` gives them, once known (the same again when a mapping is recalled)."""

    __slots__ = ("hashed",)

    def __init__(self, entries: Mapping[str, object] | None = None) -> None:
        super().__init__(entries or {})
        self.hashed: tuple[bytes, bytes, dict[str, tuple[int, bytes]] | None] | None = None


class _Fresh(_Dir):
    """A second-level directory not seen before: remembered once its id is known."""

    __slots__ = ("files",)

    def __init__(self, entries: Mapping[str, object], files: tuple[tuple[str, bytes], ...]) -> None:
        super().__init__(entries)
        self.files = files


def _insert(root: _Dir, path: str, data: bytes) -> None:
    parts = split_path(path)
    node = root
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = _Dir()
        if not isinstance(child, _Dir):
            raise InvalidPath(f"{path!r} needs {part!r} to be a directory, but it is a file")
        node = child
    if parts[-1] in node:
        raise InvalidPath(f"{path!r} is both a file and a directory")
    node[parts[-1]] = bytes(data)


def _hash_node(node: _Dir) -> bytes:
    if node.hashed is not None:
        return node.hashed[0]
    entries: list[tuple[str, int, bytes]] = []
    for name, child in node.items():
        if isinstance(child, _Known):
            entries.append((name, MODE_TREE, child.raw))
        elif isinstance(child, _Dir):
            entries.append((name, MODE_TREE, _hash_node(child)))
        else:
            assert isinstance(child, bytes)
            entries.append((name, MODE_BLOB, object_id(BLOB, child)))
    return _hashed(node, entries, False)[0]


def _hashed(node: _Dir, entries: list[tuple[str, int, bytes]],
            top: bool) -> tuple[bytes, bytes, dict[str, tuple[int, bytes]] | None]:
    """Record ``node``'s tree id and content (``_Dir.hashed``) from its entries."""
    data = serialize_tree(entries)
    raw = object_id(TREE, data)
    listing = {name: (mode, oid) for name, mode, oid in entries} if top or len(entries) >= _EntryMemo.LARGE else None
    node.hashed = (raw, data, listing)
    if isinstance(node, _Fresh):
        _DIRS.put(node.files, raw)
    return node.hashed


def _write_node(
    repo: pygit2.Repository,
    batch: ObjectBatch,
    node: _Dir,
    base: bytes | None,
    path: str,
    trees: dict[str, pygit2.Oid],
) -> pygit2.Oid:
    hashed = node.hashed
    if hashed is not None and hashed[0] == base:
        trees[path] = pygit2.Oid(raw=base)  # what base has here: written, nothing to look into
        return trees[path]
    memo = _entry_memo(repo)
    known = memo.get(repo, base, batch) if base is not None else {}
    if hashed is not None and hashed[2] is not None and known:
        # Hashed before (a plan's clusters tree): only its entries that differ from base's
        # may need writing; one set difference instead of a step per cluster.
        raw, data, listing = hashed
        for name, _ in hashed[2].items() - known.items():
            _write_child(repo, batch, name, node[name], known.get(name), path, trees)
    else:
        entries = [_write_child(repo, batch, name, child, known.get(name), path, trees)
                   for name, child in node.items()]
        raw, data, listing = _hashed(node, entries, path.count("/") < 1)
    if base == raw:
        trees[path] = pygit2.Oid(raw=raw)  # unchanged subtree: nothing to write, nothing to check
    else:
        trees[path] = batch.add(TREE, data)
    if listing is not None:
        memo.put(raw, listing)
    return trees[path]


def _write_child(repo: pygit2.Repository, batch: ObjectBatch, name: str, child: object,
                 old: tuple[int, bytes] | None, path: str, trees: dict[str, pygit2.Oid]) -> tuple[str, int, bytes]:
    """Queue what one entry of a directory needs (nothing when ``old``, the entry of the
    same name in base, is the same) and return the entry."""
    if isinstance(child, _Known):
        if (old is not None and old[1] == child.raw and old[0] == _TREE_MODE) or pygit2.Oid(raw=child.raw) in repo:
            return name, MODE_TREE, child.raw
        # Hashed before but never written here: write it out like a new directory.
        fresh = _Dir()
        for sub, data in child.files:
            _insert(fresh, sub, data)
        child = _Fresh(fresh, child.files)
    if isinstance(child, _Dir):
        old_tree = old[1] if old is not None and old[0] == _TREE_MODE else None
        return name, MODE_TREE, _write_node(repo, batch, child, old_tree, f"{path}/{name}" if path else name, trees).raw
    assert isinstance(child, bytes)
    raw = object_id(BLOB, child)
    if old is None or old[1] != raw or old[0] != _BLOB_MODE:
        batch.add(BLOB, child)
    return name, MODE_BLOB, raw


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
    """Each directory directly under ``path`` of ``tree`` and its tree id, in one tree read
    (none when ``tree_entries`` remembers it)."""
    sub = subtree_id(repo, tree, path)
    if sub is None:
        return {}
    return {name: pygit2.Oid(raw=raw) for name, (mode, raw) in tree_entries(repo, sub).items()
            if mode == _TREE_MODE}


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
