"""The agent's source: a narrow fetch of ``cluster/<name>`` and what its head commit says.

Only that one branch is fetched into a local bare cache. The head commit's trailers
carry the plan generation (must never go backwards), the Raft term (recorded for
information), ``Qonnect-Allow-Empty`` and ``Qonnect-Prune-Limit``. Every ``*.yaml``
file holds Kubernetes objects (one per file in the render layout); ``sops-*`` files are
encrypted and are skipped and counted, since this agent has no decryption keys.

The branch is hostile until checked: files are parsed through ``model.parsing`` with
the same limits as goals (file and tree size, alias expansion, nesting), symlinks and
submodule entries are never followed (skipped, with a warning), and every document must
be an object with string ``apiVersion``, ``kind`` and ``metadata.name``. Anything else
makes the whole commit unreadable (``BranchUnreadable``): nothing of it is applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from qonnect_gitops.agent import verify
from qonnect_gitops.agent.verify import TrustedKeys
from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.lsrefs import LsRefsError, Unsupported, ls_ref
from qonnect_gitops.gitstore.remote import narrow_fetch
from qonnect_gitops.gitstore.tree import read_tree_files
from qonnect_gitops.logs import get_logger, redact_url
from qonnect_gitops.model.errors import GoalsError
from qonnect_gitops.model.parsing import check_tree, load_documents
from qonnect_gitops.model.report import MAX_GENERATION
from qonnect_gitops.model.status import RefusalReason

log = get_logger(__name__)
MAX_PROBLEMS_SHOWN = 5
_NUMBER = re.compile(r"[0-9]{1,16}")  # ASCII digits only: int() also takes "+1", "1_0" and other scripts' digits


class SourceError(Exception):
    """The branch could not be fetched or read (``BranchUnreadable``), or its head is not
    signed by a key the agent trusts (``UnsignedCommit``, ``UntrustedSigner``: ``agent.verify``)."""

    def __init__(self, message: str, reason: RefusalReason = RefusalReason.BRANCH_UNREADABLE) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Revision:
    """One commit of the cluster branch, parsed."""

    commit: str
    generation: int | None
    term: int | None
    plan: str | None
    allow_empty: bool
    prune_limit: int | None
    objects: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...] = field(default=())
    paths: tuple[str, ...] = field(default=())  # the file of each object, aligned with ``objects``
    ignored: tuple[str, ...] = field(default=())  # symlinks and submodules: never read


# Remotes that answered ls-refs in protocol v0: polled by fetching, never asked again.
_V0_REMOTES: set[str] = set()


def fetch(cache: Path, url: str, branch: str, credentials: Any = None) -> str:
    """The branch's head commit, fetched into ``cache`` when it moved. Raises ``SourceError``.

    An idle poll costs one protocol v2 ``ls-refs`` of this branch alone (see
    ``gitstore.lsrefs``): hundreds of bytes, where a fetch first downloads every branch
    name of the fleet. Only a moved branch, a first poll, or a remote that does not speak
    v2 to us is fetched (``narrow_fetch``: ``git fetch`` naming the branch where it can,
    libgit2 otherwise)."""
    ref = f"refs/heads/{branch}"
    cached = _cached_head(cache, ref)
    advertised = None
    if cached is not None and url not in _V0_REMOTES:
        try:
            answer = ls_ref(url, ref, credentials)
        except Unsupported as exc:
            _V0_REMOTES.add(url)
            log.info("poll_protocol_v0", url=redact_url(url), why=str(exc))
        except (LsRefsError, ValueError) as exc:
            log.debug("poll_ls_refs_failed", url=redact_url(url), error=str(exc))  # the fetch says why
        else:
            if answer.commit == cached:
                return cached
            if answer.commit is None:
                raise SourceError(f"{redact_url(url)} has no branch {branch}")
            advertised = answer.commit
    try:
        result = narrow_fetch(cache, url, branch, credentials, advertised=advertised)
    except Exception as exc:  # RemoteError, GitError, OSError: all mean "unreachable or unreadable"
        raise SourceError(str(exc)) from exc
    assert result.commit is not None
    return result.commit


def _cached_head(cache: Path, ref: str) -> str | None:
    """The commit the cache holds for ``ref``, when the commit itself is there too."""
    if not (Path(cache) / "HEAD").exists():
        return None
    try:
        repo = pygit2.Repository(str(cache))
        target = repo.references[ref].target
    except (KeyError, pygit2.GitError, ValueError):
        return None
    if not isinstance(target, pygit2.Oid) or target not in repo:
        return None
    return str(target)


def read_revision(cache: Path, commit: str, trust: TrustedKeys | None = None, applied: str | None = None) -> Revision:
    """Parse the commit's trailers and manifests. Raises ``SourceError`` on unreadable content,
    and, with ``trust``, on a commit not signed by a trusted key before anything of it is
    parsed (``applied``, the commit the cluster runs, was judged when it was adopted)."""
    ignored: list[str] = []
    try:
        repo = pygit2.Repository(str(cache))
        obj = repo[commit].peel(pygit2.Commit)
        untrusted = verify.judge(obj, trust) if trust is not None and commit != applied else None
        if untrusted is not None:
            raise SourceError(untrusted.message, untrusted.reason)
        files = read_tree_files(repo, commit, skipped=ignored)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise SourceError(f"commit {commit[:12]} unreadable: {exc}") from exc
    for path in ignored:
        log.warning("branch_entry_skipped", commit=commit[:12], path=path,
                    why="not a regular file (symlink or submodule)")
    too_big = check_tree(files, f"commit {commit[:12]}")
    if too_big:
        raise SourceError("; ".join(p.message for p in too_big))
    found: dict[str, str] = {}
    for key, value in tr.parse_trailers(obj.message):
        found[key] = value
    objects: list[dict[str, Any]] = []
    paths: list[str] = []
    skipped: list[str] = []
    for path in sorted(files):
        base = path.rsplit("/", 1)[-1]
        if not base.endswith((".yaml", ".yml")):
            continue
        if base.startswith("sops-"):
            skipped.append(path)
            continue
        try:
            docs = load_documents(path, files[path])
        except GoalsError as exc:
            raise SourceError("; ".join(str(p) for p in exc.problems[:MAX_PROBLEMS_SHOWN])) from exc
        for doc in docs:
            why = _not_an_object(doc)
            if why:
                raise SourceError(f"{path}: not a Kubernetes object ({why})")
            objects.append(doc)
            paths.append(path)
    return Revision(
        commit=commit,
        generation=trailer_number(found, tr.GENERATION, commit),
        term=trailer_number(found, tr.TERM, commit),
        plan=found.get(tr.PLAN),
        allow_empty=found.get(tr.ALLOW_EMPTY, "").lower() == "true",
        prune_limit=trailer_number(found, tr.PRUNE_LIMIT, commit),
        objects=tuple(objects),
        skipped=tuple(skipped),
        paths=tuple(paths),
        ignored=tuple(ignored),
    )


def _not_an_object(doc: Any) -> str:
    """'' for a mapping with string apiVersion, kind, metadata.name (and namespace, if any)."""
    if not isinstance(doc, dict):
        return "a mapping is needed"
    meta = doc.get("metadata")
    if not isinstance(doc.get("apiVersion"), str) or not doc["apiVersion"] or not isinstance(doc.get("kind"), str) \
            or not doc["kind"] or not isinstance(meta, dict) or not isinstance(meta.get("name"), str) \
            or not meta["name"]:
        return "needs apiVersion, kind and metadata.name, all strings"
    if meta.get("namespace") is not None and not isinstance(meta["namespace"], str):
        return "metadata.namespace must be a string"
    return ""


def trailer_number(found: dict[str, str], name: str, commit: str) -> int | None:
    """The numeric trailer ``name`` (generation, term, prune limit), None when absent. A value
    that is not a whole number from 0 to ``MAX_GENERATION`` (what a report can carry, 2^53)
    makes the commit unreadable: a number applied here is reported to the leads later, and
    one the report model refuses would silence the cluster."""
    value = found.get(name)
    if value is None:
        return None
    value = value.strip()
    if not _NUMBER.fullmatch(value) or int(value) > MAX_GENERATION:
        raise SourceError(f"commit {commit[:12]}: trailer {name}: {value[:40]!r} is not a whole number "
                          f"from 0 to {MAX_GENERATION}")
    return int(value)
